"""Local (non-interactive) operations on additive shares over Z_2^64.

Linear maps commute with additive sharing: if ``x = x0 + x1`` then
``L(x) = L(x0) + L(x1)`` for any Z_2^64-linear ``L``, so each server applies
them to its own share with no communication. Public constants are added by
party 0 only. :func:`truncate` is SecureML's local truncation (Mohassel-Zhang,
IEEE S&P 2017, Theorem 1): party 0 computes ``s0 >> f``, party 1 computes
``-((-s1) >> f)``; the result is ``floor(x / 2^f)`` or one more, except with
probability ``2^(l_x + 1 - 64)`` when ``|x| < 2^l_x``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crypto.errors import ParameterInvalid
from crypto.shares._ring import RingArray, as_ring, check_party, same_shape, to_ring_int

_MAX_SHIFT = 62


def add(first: RingArray, second: RingArray) -> RingArray:
    """Return the share of ``x + y`` from shares of ``x`` and ``y`` (same party)."""
    a, b = as_ring(first, name="first"), as_ring(second, name="second")
    same_shape(a, b, what="add")
    return a + b


def sub(first: RingArray, second: RingArray) -> RingArray:
    """Return the share of ``x - y`` from shares of ``x`` and ``y`` (same party)."""
    a, b = as_ring(first, name="first"), as_ring(second, name="second")
    same_shape(a, b, what="sub")
    return a - b


def add_public(share: RingArray, public: RingArray, *, party: int) -> RingArray:
    """Return the share of ``x + c`` for a public encoded ``c``: only party 0 adds it."""
    s, c = as_ring(share, name="share"), as_ring(public, name="public")
    if check_party(party) == 1:
        return s.copy()
    return s + np.broadcast_to(c, s.shape)


def sub_public(share: RingArray, public: RingArray, *, party: int) -> RingArray:
    """Return the share of ``x - c`` for a public encoded ``c``: only party 0 subtracts it."""
    s, c = as_ring(share, name="share"), as_ring(public, name="public")
    if check_party(party) == 1:
        return s.copy()
    return s - np.broadcast_to(c, s.shape)


def mul_public(share: RingArray, factor: Any) -> RingArray:
    """Return the share of ``k * x`` for a public signed integer ``k`` (scalar or array).

    Fractional bits add up: an ``f``-bit share times a ``g``-bit encoded factor
    carries ``f + g`` bits; follow with :func:`truncate` or decode with ``f + g``.
    """
    s = as_ring(share, name="share")
    return s * to_ring_int(factor)


def mul_public_fixed(share: RingArray, scalar: float, *, frac_bits: int, party: int) -> RingArray:
    """Multiply by a public real encoded with ``frac_bits`` bits, then truncate them away.

    The share keeps its own fractional bits; the product is exact up to one
    unit and the SecureML truncation failure probability (see :func:`truncate`).

    Raises
    ------
    ParameterInvalid
        If ``scalar`` is not finite or does not fit in 62 bits once scaled.
    """
    if not 0 <= frac_bits <= _MAX_SHIFT:
        raise ParameterInvalid(f"frac_bits must be in [0, {_MAX_SHIFT}], got {frac_bits}")
    scaled = float(scalar) * float(1 << frac_bits)
    if not np.isfinite(scaled) or abs(scaled) >= 2.0**62:
        raise ParameterInvalid(f"scalar with frac_bits={frac_bits} does not fit the ring")
    product = mul_public(share, to_ring_int(round(scaled)))
    return truncate(product, frac_bits, party=party)


def sum_axis(share: RingArray, axis: int | None = None) -> RingArray:
    """Return the share of the sum of ``x`` along ``axis`` (all axes when None)."""
    s = as_ring(share, name="share")
    return np.asarray(s.sum(axis=axis, dtype=np.uint64), dtype=np.uint64)


def matmul_public(share: RingArray, matrix: RingArray) -> RingArray:
    """Return the share of ``M x_i`` for every row ``x_i`` of a ``[N, C]`` share.

    Parameters
    ----------
    share
        ``[N, C]`` share (or ``[C]`` for one sample).
    matrix
        Public encoded ``[R, C]`` ring matrix (``EncodedMatrix.values``).

    Returns
    -------
    numpy.ndarray
        ``[N, R]`` share of ``x @ M^T``; fractional bits add up as in :func:`mul_public`.
    """
    s, m = as_ring(share, name="share"), as_ring(matrix, name="matrix")
    if m.ndim != 2 or s.shape[-1] != m.shape[1]:
        raise ParameterInvalid(f"matmul_public: share {s.shape} and matrix {m.shape} differ")
    return np.asarray(s @ m.T, dtype=np.uint64)


def truncate(share: RingArray, bits: int, *, party: int) -> RingArray:
    """Drop ``bits`` fractional bits locally (SecureML truncation).

    Parameters
    ----------
    share
        This party's share of ``x``.
    bits
        Number of bits to shift away, ``0 <= bits <= 62``.
    party
        0 or 1; the two parties run different formulas.

    Returns
    -------
    numpy.ndarray
        Share of ``floor(x / 2^bits) + e`` with ``e`` in ``{0, 1}``.

    Notes
    -----
    Fails (result off by about ``2^(64 - bits)``) with probability at most
    ``2^(l_x + 1 - 64)`` where ``|x| < 2^l_x``; see
    :func:`crypto.shares.bounds.truncation_failure_bound`.
    """
    s = as_ring(share, name="share")
    if not 0 <= bits <= _MAX_SHIFT:
        raise ParameterInvalid(f"bits must be in [0, {_MAX_SHIFT}], got {bits}")
    shift = np.uint64(bits)
    if check_party(party) == 0:
        return s >> shift
    return -((-s) >> shift)
