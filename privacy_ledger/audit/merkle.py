"""Merkle tree hashing of RFC 6962 / RFC 9162 (Certificate Transparency) with SM3.

RFC 9162 section 2.1.1 defines the Merkle Tree Hash of a list of entries::

    MTH({})      = HASH()
    MTH({d0})    = HASH(0x00 || d0)                      (leaf)
    MTH(D[n])    = HASH(0x01 || MTH(D[0:k]) || MTH(D[k:n]))   (node),
                   k = largest power of two < n

The hash is pluggable (:class:`TreeHasher`): the audit log uses SM3
(GB/T 32905) through :func:`crypto.sm.sm3_digest`; tests swap in SHA-256 to
check the code against the published RFC 6962 test vectors.

:class:`MerkleTree` keeps every complete (perfect) subtree hash, so the root
at any size, and any subtree hash a proof needs, costs O(log n) hash calls.
Proof generation and verification live in :mod:`privacy_ledger.audit.proofs`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from crypto.sm import sm3_digest
from privacy_ledger.errors import AuditParameterInvalid, HashSizeInvalid, ProofRangeInvalid

__all__ = ["TreeHasher", "SM3_HASHER", "sha256_hasher", "MerkleTree", "LEAF_PREFIX", "NODE_PREFIX"]

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"


@dataclass(frozen=True, kw_only=True)
class TreeHasher:
    """Leaf, node and empty-tree hashing with domain-separation prefixes.

    Parameters
    ----------
    name
        Hash name recorded with the log (``"sm3"``).
    digest
        One-shot hash function, bytes -> ``digest_size`` bytes.
    digest_size
        Output length in bytes.
    """

    name: str
    digest: Callable[[bytes], bytes]
    digest_size: int

    def hash_leaf(self, data: bytes) -> bytes:
        """Return ``HASH(0x00 || data)``."""
        return self.digest(LEAF_PREFIX + data)

    def hash_children(self, left: bytes, right: bytes) -> bytes:
        """Return ``HASH(0x01 || left || right)``."""
        return self.digest(NODE_PREFIX + left + right)

    def empty_root(self) -> bytes:
        """Return the root of the empty tree, ``HASH("")``."""
        return self.digest(b"")

    def check(self, value: bytes, what: str) -> bytes:
        """Return ``value`` if it has the digest size, else raise :class:`HashSizeInvalid`."""
        if not isinstance(value, bytes | bytearray) or len(value) != self.digest_size:
            size = len(value) if isinstance(value, bytes | bytearray) else type(value).__name__
            raise HashSizeInvalid(f"{what}: has size {size}, want {self.digest_size}")
        return bytes(value)


#: The audit log's hasher: SM3 via OpenSSL (hashlib), self-checked by :mod:`crypto.sm`.
SM3_HASHER = TreeHasher(name="sm3", digest=sm3_digest, digest_size=32)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def sha256_hasher() -> TreeHasher:
    """Return the RFC 6962 SHA-256 hasher (used to check the code against RFC vectors)."""
    return TreeHasher(name="sha256", digest=_sha256, digest_size=32)


def largest_power_of_two_below(n: int) -> int:
    """Return the largest power of two strictly smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """Append-only Merkle tree that stores every perfect subtree hash.

    ``levels[h][i]`` is the hash of leaves ``[i * 2**h, (i + 1) * 2**h)``;
    it exists as soon as those leaves do. Memory is about two hashes per leaf.

    Parameters
    ----------
    hasher
        Leaf/node hasher; defaults to :data:`SM3_HASHER`.
    """

    def __init__(self, *, hasher: TreeHasher = SM3_HASHER) -> None:
        self.hasher = hasher
        self._levels: list[list[bytes]] = [[]]

    @property
    def size(self) -> int:
        """Number of leaves."""
        return len(self._levels[0])

    def append_leaf_hash(self, leaf_hash: bytes) -> int:
        """Append a leaf by its hash; return its index."""
        node = self.hasher.check(leaf_hash, "leaf_hash")
        index = self.size
        levels = self._levels
        levels[0].append(node)
        level, i = 0, index
        while i & 1:
            node = self.hasher.hash_children(levels[level][i - 1], node)
            level, i = level + 1, i >> 1
            if len(levels) == level:
                levels.append([])
            levels[level].append(node)
        return index

    def append_data(self, data: bytes) -> int:
        """Hash ``data`` as a leaf (``HASH(0x00 || data)``), append it, return its index."""
        return self.append_leaf_hash(self.hasher.hash_leaf(data))

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append many leaf hashes in order."""
        for leaf_hash in leaf_hashes:
            self.append_leaf_hash(leaf_hash)

    def leaf_hash(self, index: int) -> bytes:
        """Return the stored hash of leaf ``index``."""
        if not 0 <= index < self.size:
            raise ProofRangeInvalid(f"index: {index} is beyond size {self.size}")
        return self._levels[0][index]

    def range_hash(self, begin: int, end: int) -> bytes:
        """Return ``MTH(D[begin:end])`` for a range whose ``begin`` is aligned as RFC 9162 needs.

        Raises
        ------
        ProofRangeInvalid
            When the range is empty, beyond the tree, or not RFC-aligned.
        """
        if not 0 <= begin < end <= self.size:
            raise ProofRangeInvalid(f"range: [{begin}, {end}) is not inside [0, {self.size})")
        n = end - begin
        if n & (n - 1) == 0:
            height = n.bit_length() - 1
            if begin % n:
                raise ProofRangeInvalid(f"range: [{begin}, {end}) is not aligned to {n}")
            return self._levels[height][begin >> height]
        k = largest_power_of_two_below(n)
        return self.hasher.hash_children(
            self.range_hash(begin, begin + k), self.range_hash(begin + k, end)
        )

    def root(self, size: int | None = None) -> bytes:
        """Return the Merkle Tree Hash of the first ``size`` leaves (default: all)."""
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ProofRangeInvalid(f"size: {size} is beyond the tree size {self.size}")
        if size == 0:
            return self.hasher.empty_root()
        return self.range_hash(0, size)

    def truncate(self, size: int) -> None:
        """Drop leaves from ``size`` on (used when a cached tree runs ahead of the database)."""
        if not 0 <= size <= self.size:
            raise AuditParameterInvalid(f"size: {size} not in [0, {self.size}]")
        for height, level in enumerate(self._levels):
            del level[size >> height :]
