"""SM3 cryptographic hash (GB/T 32905-2016, ISO/IEC 10118-3:2018).

The digest comes from OpenSSL through :func:`hashlib.new` (``"sm3"``). When the
linked OpenSSL lacks SM3, or fails the import-time self-check against the
standard vectors, a streaming fallback built on gmssl's compression function
is used instead. :func:`sm3_backend` tells which one is active.

Notes
-----
gmssl's own ``sm3_hash`` takes the whole message as a list and mutates it; the
fallback here only borrows its compression function ``sm3_cf`` and keeps its
own chaining state, so it streams and never touches the caller's data.
gmssl's pure-Python SM3 is roughly a thousand times slower than OpenSSL.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Protocol, cast

from gmssl import sm3 as _gmssl_sm3

__all__ = ["SM3Hasher", "sm3_backend", "sm3_digest", "sm3_file"]

_log = logging.getLogger(__name__)

DIGEST_SIZE = 32
_BLOCK = 64
_CHUNK = 1 << 20

# GB/T 32905-2016 Annex A, examples 1 and 2.
_SELF_CHECK = (
    (b"abc", "66c7f0f462eeedd9d1f2d46bdc10e4e24167c4875cf2f7a2297da02b8f4ba8e0"),
    (b"abcd" * 16, "debe9ff92275b8a138604889c18e5a4d6fdb70e5387e5765293dcba39c0c5732"),
)


class _HashState(Protocol):
    def update(self, data: bytes, /) -> None: ...

    def digest(self) -> bytes: ...

    def copy(self) -> _HashState: ...


class _GmsslSM3:
    """Streaming SM3 on top of gmssl's compression function ``sm3_cf``."""

    __slots__ = ("_v", "_buf", "_length")

    def __init__(self) -> None:
        self._v: list[int] = list(_gmssl_sm3.IV)
        self._buf = b""
        self._length = 0

    def update(self, data: bytes, /) -> None:
        self._length += len(data)
        buf = self._buf + bytes(data)
        full = len(buf) - len(buf) % _BLOCK
        for off in range(0, full, _BLOCK):
            self._v = _compress(self._v, buf[off : off + _BLOCK])
        self._buf = buf[full:]

    def digest(self) -> bytes:
        bit_length = self._length * 8
        pad_zeros = (55 - self._length) % _BLOCK
        tail = self._buf + b"\x80" + b"\x00" * pad_zeros + bit_length.to_bytes(8, "big")
        v = list(self._v)
        for off in range(0, len(tail), _BLOCK):
            v = _compress(v, tail[off : off + _BLOCK])
        return b"".join(word.to_bytes(4, "big") for word in v)

    def copy(self) -> _GmsslSM3:
        twin = _GmsslSM3()
        twin._v = list(self._v)
        twin._buf = self._buf
        twin._length = self._length
        return twin


def _compress(v: list[int], block: bytes) -> list[int]:
    return cast(list[int], _gmssl_sm3.sm3_cf(v, list(block)))


def _openssl_state() -> _HashState | None:
    try:
        return cast(_HashState, hashlib.new("sm3"))
    except ValueError:
        return None


def _passes_self_check(factory: type[_GmsslSM3] | None) -> bool:
    for message, expected in _SELF_CHECK:
        state = factory() if factory is not None else _openssl_state()
        if state is None:
            return False
        state.update(message)
        if state.digest().hex() != expected:
            return False
    return True


def _select_backend() -> str:
    openssl_ok = _passes_self_check(None)
    gmssl_ok = _passes_self_check(_GmsslSM3)
    if openssl_ok:
        if not gmssl_ok:
            _log.warning("gmssl SM3 fails the GB/T 32905 vectors; no fallback available")
        return "hashlib"
    if gmssl_ok:
        _log.warning("hashlib has no working SM3; using the slow gmssl fallback")
        return "gmssl"
    raise RuntimeError("SM3 self-check failed for both hashlib (OpenSSL) and gmssl")


_BACKEND = _select_backend()


def sm3_backend() -> str:
    """Return the active SM3 implementation: ``"hashlib"`` or ``"gmssl"``."""
    return _BACKEND


class SM3Hasher:
    """Incremental SM3 hasher, in the style of :mod:`hashlib` objects.

    Examples
    --------
    >>> h = SM3Hasher()
    >>> h.update(b"ab")
    >>> h.update(b"c")
    >>> h.hexdigest()[:16]
    '66c7f0f462eeedd9'
    """

    __slots__ = ("_state",)
    digest_size = DIGEST_SIZE
    block_size = _BLOCK
    name = "sm3"

    def __init__(self) -> None:
        state = _openssl_state() if _BACKEND == "hashlib" else None
        self._state: _HashState = state if state is not None else _GmsslSM3()

    def update(self, data: bytes) -> None:
        """Feed more bytes into the hash.

        Raises
        ------
        TypeError
            If ``data`` is not a bytes-like object.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        self._state.update(bytes(data))

    def digest(self) -> bytes:
        """Return the 32-byte digest of everything fed so far (state is kept)."""
        return self._state.digest()

    def hexdigest(self) -> str:
        """Return :meth:`digest` as 64 lowercase hex characters."""
        return self.digest().hex()

    def copy(self) -> SM3Hasher:
        """Return an independent hasher with the same state."""
        twin = SM3Hasher.__new__(SM3Hasher)
        twin._state = self._state.copy()
        return twin


def sm3_digest(data: bytes) -> bytes:
    """Return the 32-byte SM3 digest of ``data``.

    Parameters
    ----------
    data
        The message.

    Returns
    -------
    bytes
        ``SM3(data)``.
    """
    hasher = SM3Hasher()
    hasher.update(data)
    return hasher.digest()


def sm3_file(path: str | os.PathLike[str]) -> bytes:
    """Return the SM3 digest of a file, read in 1 MiB chunks.

    Parameters
    ----------
    path
        File to hash; it is never loaded whole into memory.

    Returns
    -------
    bytes
        The 32-byte digest.

    Raises
    ------
    OSError
        If the file cannot be opened or read.
    """
    hasher = SM3Hasher()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    return hasher.digest()
