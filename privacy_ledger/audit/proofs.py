"""Merkle inclusion and consistency proofs (RFC 9162 sections 2.1.3 and 2.1.4).

Generation follows the RFC's recursive definitions (``PATH`` and
``SUBPROOF``) over a :class:`~privacy_ledger.audit.merkle.MerkleTree`.

Verification is a port of the *logic* of the reference verifier of
transparency-dev/merkle (``proof/verify.go``, Apache-2.0), with every one of
its error cases mapped to a typed error:

======================================  ==============================
reference error                         typed error
======================================  ==============================
index is beyond size                    :class:`ProofRangeInvalid`
leafHash has unexpected size            :class:`HashSizeInvalid`
wrong proof size                        :class:`ProofSizeInvalid`
calculated root does not match          :class:`RootMismatch`
size2 < size1                           :class:`ProofRangeInvalid`
size1=size2, but proof is not empty     :class:`ProofSizeInvalid`
consistency proof from empty tree       :class:`ProofRangeInvalid`
empty proof                             :class:`ProofSizeInvalid`
======================================  ==============================

In addition every proof hash must have the digest size
(:class:`HashSizeInvalid`), which the reference leaves to the hasher.
Verifiers return ``None`` or raise, never a bool.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from privacy_ledger.audit.merkle import MerkleTree, TreeHasher, largest_power_of_two_below
from privacy_ledger.errors import ProofRangeInvalid, ProofSizeInvalid, RootMismatch

__all__ = [
    "inclusion_proof",
    "consistency_proof",
    "root_from_inclusion_proof",
    "verify_inclusion",
    "root_from_consistency_proof",
    "verify_consistency",
]


# --- generation (RFC 9162 2.1.3.1 PATH and 2.1.4.1 SUBPROOF) ---------------------------


def _path(tree: MerkleTree, m: int, begin: int, end: int) -> list[bytes]:
    if end - begin == 1:
        return []
    k = largest_power_of_two_below(end - begin)
    if m < k:
        return [*_path(tree, m, begin, begin + k), tree.range_hash(begin + k, end)]
    return [*_path(tree, m - k, begin + k, end), tree.range_hash(begin, begin + k)]


def inclusion_proof(tree: MerkleTree, index: int, size: int) -> list[bytes]:
    """Return the audit path of leaf ``index`` in the tree of the first ``size`` leaves.

    Raises
    ------
    ProofRangeInvalid
        Unless ``0 <= index < size <= tree.size``.
    """
    if not 0 <= index < size:
        raise ProofRangeInvalid(f"index: {index} is beyond size {size}")
    if size > tree.size:
        raise ProofRangeInvalid(f"size: {size} is beyond the tree size {tree.size}")
    return _path(tree, index, 0, size)


def _subproof(tree: MerkleTree, m: int, begin: int, end: int, whole: bool) -> list[bytes]:
    n = end - begin
    if m == n:
        return [] if whole else [tree.range_hash(begin, end)]
    k = largest_power_of_two_below(n)
    if m <= k:
        return [*_subproof(tree, m, begin, begin + k, whole), tree.range_hash(begin + k, end)]
    return [*_subproof(tree, m - k, begin + k, end, False), tree.range_hash(begin, begin + k)]


def consistency_proof(tree: MerkleTree, old_size: int, new_size: int) -> list[bytes]:
    """Return the consistency proof from the tree of ``old_size`` leaves to ``new_size``.

    Raises
    ------
    ProofRangeInvalid
        Unless ``0 <= old_size <= new_size <= tree.size``.
    """
    if not 0 <= old_size <= new_size:
        raise ProofRangeInvalid(f"old_size: {old_size} not in [0, new_size={new_size}]")
    if new_size > tree.size:
        raise ProofRangeInvalid(f"new_size: {new_size} is beyond the tree size {tree.size}")
    if old_size in (0, new_size):
        return []
    return _subproof(tree, old_size, 0, new_size, True)


# --- verification (logic of transparency-dev/merkle proof/verify.go) -----------------------


def _match(calculated: bytes, expected: bytes, what: str) -> None:
    if not hmac.compare_digest(calculated, expected):
        raise RootMismatch(
            f"{what}: calculated root {calculated.hex()} does not match expected {expected.hex()}",
            expected=expected,
            calculated=calculated,
        )


def _inner_size(index: int, size: int) -> int:
    return (index ^ (size - 1)).bit_length()


def _decompose(index: int, size: int) -> tuple[int, int]:
    """Split an audit path into the part below and above where it meets the right border."""
    inner = _inner_size(index, size)
    border = bin(index >> inner).count("1")
    return inner, border


def _chain_inner(h: TreeHasher, seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, sibling in enumerate(proof):
        if (index >> i) & 1 == 0:
            seed = h.hash_children(seed, sibling)
        else:
            seed = h.hash_children(sibling, seed)
    return seed


def _chain_inner_right(h: TreeHasher, seed: bytes, proof: Sequence[bytes], index: int) -> bytes:
    for i, sibling in enumerate(proof):
        if (index >> i) & 1 == 1:
            seed = h.hash_children(sibling, seed)
    return seed


def _chain_border_right(h: TreeHasher, seed: bytes, proof: Sequence[bytes]) -> bytes:
    for sibling in proof:
        seed = h.hash_children(sibling, seed)
    return seed


def _checked(h: TreeHasher, proof: Sequence[bytes]) -> list[bytes]:
    return [h.check(p, f"proof[{i}]") for i, p in enumerate(proof)]


def root_from_inclusion_proof(
    hasher: TreeHasher, index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]
) -> bytes:
    """Compute the root implied by an inclusion proof of ``leaf_hash`` at ``index``.

    Raises
    ------
    ProofRangeInvalid
        ``index >= size`` (or negative).
    HashSizeInvalid
        The leaf hash or a proof hash has the wrong length.
    ProofSizeInvalid
        The proof does not have exactly the length the index and size imply.
    """
    if index < 0 or index >= size:
        raise ProofRangeInvalid(f"index: {index} is beyond size {size}")
    hasher.check(leaf_hash, "leaf_hash")
    inner, border = _decompose(index, size)
    if len(proof) != inner + border:
        raise ProofSizeInvalid(f"proof: wrong proof size {len(proof)}, want {inner + border}")
    hashes = _checked(hasher, proof)
    result = _chain_inner(hasher, bytes(leaf_hash), hashes[:inner], index)
    return _chain_border_right(hasher, result, hashes[inner:])


def verify_inclusion(
    hasher: TreeHasher,
    index: int,
    size: int,
    leaf_hash: bytes,
    proof: Sequence[bytes],
    root: bytes,
) -> None:
    """Verify that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` with ``root``.

    Raises
    ------
    ProofInvalid
        One of the subclasses listed for :func:`root_from_inclusion_proof`, or
        :class:`RootMismatch` when the computed root differs from ``root``.
    """
    calculated = root_from_inclusion_proof(hasher, index, size, leaf_hash, proof)
    _match(calculated, bytes(root), "inclusion")


def root_from_consistency_proof(
    hasher: TreeHasher, size1: int, size2: int, proof: Sequence[bytes], root1: bytes
) -> bytes:
    """Compute the root of the tree of ``size2`` implied by ``root1`` and a consistency proof.

    The proof is checked against ``root1`` on the way.

    Raises
    ------
    ProofRangeInvalid
        ``size2 < size1``, a negative size, or ``size1 == 0 < size2`` (a
        consistency proof from the empty tree is meaningless).
    ProofSizeInvalid
        Non-empty proof for equal sizes, empty proof, or wrong proof length.
    HashSizeInvalid
        A proof hash has the wrong length.
    RootMismatch
        The proof does not reproduce ``root1``.
    """
    if size1 < 0 or size2 < size1:
        raise ProofRangeInvalid(f"size2 ({size2}) < size1 ({size1})")
    if size1 == size2:
        if proof:
            raise ProofSizeInvalid("proof: size1 = size2, but proof is not empty")
        return bytes(root1)
    if size1 == 0:
        raise ProofRangeInvalid("size1: consistency proof from an empty tree is meaningless")
    if not proof:
        raise ProofSizeInvalid("proof: empty proof")
    inner, border = _decompose(size1 - 1, size2)
    shift = (size1 & -size1).bit_length() - 1
    inner -= shift
    seed, start = (bytes(root1), 0) if size1 == 1 << shift else (proof[0], 1)
    if len(proof) != start + inner + border:
        raise ProofSizeInvalid(
            f"proof: wrong proof size {len(proof)}, want {start + inner + border}"
        )
    hashes = _checked(hasher, proof)
    seed = hasher.check(seed, "proof[0]" if start else "root1")
    rest = hashes[start:]
    mask = (size1 - 1) >> shift
    hash1 = _chain_inner_right(hasher, seed, rest[:inner], mask)
    hash1 = _chain_border_right(hasher, hash1, rest[inner:])
    _match(hash1, bytes(root1), "consistency (root1)")
    hash2 = _chain_inner(hasher, seed, rest[:inner], mask)
    return _chain_border_right(hasher, hash2, rest[inner:])


def verify_consistency(
    hasher: TreeHasher,
    size1: int,
    size2: int,
    proof: Sequence[bytes],
    root1: bytes,
    root2: bytes,
) -> None:
    """Verify that the tree of ``size2`` with ``root2`` extends the one of ``size1``/``root1``.

    As in the reference, any tree is consistent with the empty tree (``size1 == 0``)
    given an empty proof, and equal sizes need equal roots and an empty proof.

    Raises
    ------
    ProofInvalid
        A subclass as listed for :func:`root_from_consistency_proof`, or
        :class:`RootMismatch` when the roots do not match.
    """
    if size1 < 0 or size2 < size1:
        raise ProofRangeInvalid(f"size2 ({size2}) < size1 ({size1})")
    if size1 == size2:
        if proof:
            raise ProofSizeInvalid("proof: size1 = size2, but proof is not empty")
        _match(bytes(root1), bytes(root2), "consistency (equal sizes)")
        return
    if size1 == 0:
        if proof:
            raise ProofSizeInvalid(
                f"proof: expected empty proof from the empty tree, got {len(proof)} hashes"
            )
        return
    calculated = root_from_consistency_proof(hasher, size1, size2, proof, root1)
    _match(calculated, bytes(root2), "consistency (root2)")
