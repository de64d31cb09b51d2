"""Bit-sliced boolean shares: 64 values per ``uint64`` word, XOR sharing, Beaver AND.

A vector of ``n`` ring elements is bit-sliced into a ``(64, W)`` word array,
``W = ceil(n / 64)``: bit ``l`` of word ``[i, w]`` is bit ``i`` of value
``64 w + l`` (lanes past ``n`` are zero). One numpy operation on a ``(W,)`` row
then evaluates one gate for every value at once (the bit-slicing of Biham's
DES, FSE 1997, applied to shares as in ABY, Demmler-Schneider-Zohner, NDSS 2015).

XOR sharing: ``x = x0 ^ x1``. XOR and AND with a public word are local; an AND
of two shared words uses one Beaver triple ``c = a & b`` (Beaver, CRYPTO 1991):
both parties open ``d = x ^ a`` and ``e = y ^ b`` and set
``z_i = c_i ^ (d & b_i) ^ (e & a_i)``, party 0 adding ``d & e``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from crypto.errors import ParameterInvalid
from crypto.shares._ring import RING_BITS, RingArray, as_ring, check_party

WORD_BITS = 64
"""Values per bit-sliced word."""

Words = NDArray[np.uint64]
ALL_ONES = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def words_for(count: int) -> int:
    """Return ``W = ceil(count / 64)``, the words one bit position of ``count`` values needs."""
    if count < 1:
        raise ParameterInvalid(f"count must be >= 1, got {count}")
    return -(-count // WORD_BITS)


def _padded(values: RingArray) -> RingArray:
    ring = as_ring(values, name="values").reshape(-1)
    out = np.zeros(words_for(ring.size) * WORD_BITS, dtype=np.uint64)
    out[: ring.size] = ring
    return out


def bitslice(values: RingArray) -> Words:
    """Transpose ``n`` ring elements into ``(64, W)`` words, one row per bit position.

    Parameters
    ----------
    values
        ``uint64`` ring array, at least one element.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of shape ``(64, W)``; padding lanes are 0.
    """
    padded = _padded(values)
    width = padded.size // WORD_BITS
    raw = padded.astype("<u8").view(np.uint8).reshape(width, WORD_BITS, 8)
    bits = np.unpackbits(raw, axis=2, bitorder="little")  # (W, lane, bit)
    packed = np.packbits(bits.transpose(2, 0, 1), axis=2, bitorder="little")  # (bit, W, 8)
    return np.ascontiguousarray(packed).view("<u8").reshape(RING_BITS, width).astype(np.uint64)


def unbitslice(words: Words, count: int) -> RingArray:
    """Inverse of :func:`bitslice`: ``(64, W)`` words back to ``count`` ring elements."""
    grid = as_ring(words, name="words")
    if grid.ndim != 2 or grid.shape[0] != RING_BITS or grid.shape[1] != words_for(count):
        raise ParameterInvalid(f"words of shape {grid.shape} cannot hold {count} values")
    raw = grid.astype("<u8").view(np.uint8).reshape(RING_BITS, grid.shape[1], 8)
    bits = np.unpackbits(raw, axis=2, bitorder="little")  # (bit, W, lane)
    packed = np.packbits(bits.transpose(1, 2, 0), axis=2, bitorder="little")  # (W, lane, 8)
    flat = np.ascontiguousarray(packed).view("<u8").reshape(-1).astype(np.uint64)
    return flat[:count]


def pack_lanes(flags: NDArray[np.bool_]) -> Words:
    """Pack one flag per value into ``(W,)`` words (lane ``l`` of word ``w``: flag ``64w+l``)."""
    array = np.asarray(flags, dtype=bool).reshape(-1)
    padded = np.zeros(words_for(array.size) * WORD_BITS, dtype=bool)
    padded[: array.size] = array
    return np.packbits(padded, bitorder="little").view("<u8").astype(np.uint64)


def unpack_lanes(words: Words, count: int) -> NDArray[np.bool_]:
    """Inverse of :func:`pack_lanes`."""
    raw = as_ring(words, name="words").astype("<u8").view(np.uint8)
    return np.unpackbits(raw, bitorder="little")[:count].astype(bool)


def padding_mask(count: int) -> np.uint64:
    """Return the lanes of the last word that hold no value (0 when ``count % 64 == 0``)."""
    used = count % WORD_BITS
    if used == 0:
        return np.uint64(0)
    return np.uint64(((1 << WORD_BITS) - 1) ^ ((1 << used) - 1))


def xor_public(share: Words, public: Words, *, party: int) -> Words:
    """Return the share of ``x ^ p`` for a public ``p``: only party 0 applies it."""
    if check_party(party) == 1:
        return share.copy()
    return share ^ public


def and_open(x: Words, y: Words, a: Words, b: Words) -> tuple[Words, Words]:
    """Return this party's masked words ``(x ^ a, y ^ b)`` of a Beaver AND."""
    return x ^ a, y ^ b


def and_finish(d: Words, e: Words, triple: tuple[Words, Words, Words], *, party: int) -> Words:
    """Return this party's share of ``x & y`` from the opened ``d``, ``e`` and its triple share."""
    a, b, c = triple
    z: Words = c ^ (d & b) ^ (e & a)
    if check_party(party) == 0:
        z ^= d & e
    return z
