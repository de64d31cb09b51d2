"""Overflow bounds for sums, products and the Mahalanobis quadratic form.

Every bound here is exact integer arithmetic on worst-case magnitudes: a
computation is refused (``EncodingOverflow``) before it runs if the largest
value it could produce reaches ``2^63`` and would wrap the ring Z_2^64. The
derivations are written out in ``docs/crypto-shares.md``; the local truncation
failure bound is Theorem 1 of SecureML (Mohassel-Zhang, IEEE S&P 2017).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from crypto.errors import EncodingOverflow, ParameterInvalid
from crypto.shares._ring import RING_BITS, SIGNED_LIMIT, RingArray, to_ring_int
from crypto.shares.codec import FixedPointCodec

MAX_MATRIX_FRAC_BITS = 30
"""Largest number of fractional bits :func:`encode_quadratic_form` will use."""


def _check_fits(value: int, what: str) -> None:
    if value >= SIGNED_LIMIT:
        raise EncodingOverflow(
            f"{what}: worst-case magnitude needs {value.bit_length()} bits, the ring "
            f"holds {RING_BITS - 1} signed bits"
        )


def sum_bound(codec: FixedPointCodec, terms: int) -> int:
    """Return the worst-case integer magnitude of a sum of ``terms`` encoded values.

    Raises
    ------
    EncodingOverflow
        If the bound reaches ``2^63``.
    """
    bound = terms * codec.bound_int
    _check_fits(bound, f"sum of {terms} values of codec {codec.name!r}")
    return bound


def product_sum_bound(first: FixedPointCodec, second: FixedPointCodec, terms: int) -> int:
    """Return the worst-case magnitude of a sum of ``terms`` products ``x * y``.

    The result carries ``first.frac_bits + second.frac_bits`` fractional bits;
    it covers weighted sums (``second`` = public weights) and second moments.

    Raises
    ------
    EncodingOverflow
        If the bound reaches ``2^63``.
    """
    bound = terms * first.bound_int * second.bound_int
    _check_fits(bound, f"sum of {terms} products of {first.name!r} x {second.name!r}")
    return bound


@dataclass(frozen=True)
class EncodedMatrix:
    """A public real matrix encoded into the ring with ``frac_bits`` fractional bits.

    Attributes
    ----------
    values
        ``uint64`` ring matrix ``round(M * 2^frac_bits)``.
    frac_bits
        Fractional bits of the entries.
    row_abs_sum
        ``max_r sum_c |M_int[r, c]|``, the integer row bound used by the proofs.
    """

    values: RingArray
    frac_bits: int
    row_abs_sum: int


def quadratic_form_bound(
    codec: FixedPointCodec, row_abs_sum: int, n_samples: int, n_classes: int
) -> int:
    """Worst-case magnitude of ``sum_i d_i^T (M d_i)`` with ``|d| <= 2B``.

    ``d_i = x_i - mean_i`` has integer magnitude at most ``D = 2 * B * 2^f``;
    ``w = M d`` has ``|w_c| <= R * D`` with ``R`` the integer row bound, so
    the sum over ``n_samples * n_classes`` products is at most ``N * C * D * R * D``.

    Raises
    ------
    EncodingOverflow
        If the bound reaches ``2^63``.
    """
    if n_samples < 1 or n_classes < 1 or row_abs_sum < 0:
        raise ParameterInvalid("n_samples and n_classes must be >= 1, row_abs_sum >= 0")
    dev = 2 * codec.bound_int
    bound = n_samples * n_classes * dev * row_abs_sum * dev
    _check_fits(bound, f"quadratic form over {n_samples}x{n_classes} values")
    return bound


def encode_quadratic_form(codec: FixedPointCodec, matrix: Any, n_samples: int) -> EncodedMatrix:
    """Encode a public ``C x C`` matrix with the most fractional bits that cannot wrap.

    Parameters
    ----------
    codec
        Codec of the shared values ``x`` (the deviations are bounded by ``2B``).
    matrix
        Real ``C x C`` matrix (e.g. ``Sigma^-1``), public.
    n_samples
        Number of samples ``N`` summed into one score.

    Returns
    -------
    EncodedMatrix
        The largest ``frac_bits <= 30`` for which :func:`quadratic_form_bound` holds.

    Raises
    ------
    EncodingOverflow
        If even ``frac_bits = 0`` would wrap, or the matrix is not finite.
    ParameterInvalid
        If the matrix is not square.
    """
    real = np.asarray(matrix, dtype=np.float64)
    if real.ndim != 2 or real.shape[0] != real.shape[1] or real.shape[0] == 0:
        raise ParameterInvalid(f"matrix must be square C x C, got shape {real.shape}")
    if not bool(np.isfinite(real).all()):
        raise EncodingOverflow("matrix has non-finite entries")
    for bits in range(MAX_MATRIX_FRAC_BITS, -1, -1):
        scaled = np.rint(real * float(1 << bits))
        if float(np.abs(scaled).max()) >= 2.0**62:
            continue
        ints = scaled.astype(np.int64)
        row = max(sum(abs(int(v)) for v in r) for r in ints.tolist())
        try:
            quadratic_form_bound(codec, row, n_samples, real.shape[0])
        except EncodingOverflow:
            continue
        return EncodedMatrix(values=to_ring_int(ints), frac_bits=bits, row_abs_sum=row)
    raise EncodingOverflow(
        f"matrix too large for {n_samples} samples: no fractional bits keep the quadratic "
        "form below 2^63"
    )


def truncation_failure_bound(value_bits: int) -> float:
    """Probability bound that SecureML local truncation of one element fails.

    For a shared value with ``|x| < 2^value_bits`` the two locally truncated
    shares reconstruct to ``floor(x / 2^f)`` or that plus one, except with
    probability at most ``2^(value_bits + 1 - 64)``.

    Raises
    ------
    ParameterInvalid
        If ``value_bits`` is not in ``[0, 63]``.
    """
    if not 0 <= value_bits <= RING_BITS - 1:
        raise ParameterInvalid(f"value_bits must be in [0, 63], got {value_bits}")
    return math.ldexp(1.0, value_bits + 1 - RING_BITS)
