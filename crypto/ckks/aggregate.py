"""Homomorphic evaluation on packed predictions: weighted sums and quadratic scores.

Weighted sum, ``"integer"`` weight encoding (CKKS_AGGREGATION): public weights
``w_k >= 0`` (summing to 1) are rounded to integers ``W_k`` with
``sum W_k = 2^b`` exactly (largest-remainder rounding), and
``sum_k W_k ct_k`` is evaluated by a Horner scheme over the non-adjacent form of
the ``W_k`` (doublings and additions only). No rescaling happens, so one 60-bit
data prime suffices and the ciphertexts on the wire stay small; the key
authority divides by ``2^b`` after decryption. The rounding error is at most
``n * B * 2^-b`` for ``n`` participants and clip bound ``B``.

Weighted sum, ``"scalar"`` encoding (CKKS_SCORING): plaintext-scalar multiply
and rescale (depth 1).

Quadratic score (CKKS_SCORING, depth 2): with class-major packing,
``z = L (p - mu)`` is plaintext-scalar multiplies of whole ciphertexts, then
squares, a sum over classes and one slot sum (rotations) per chunk; this is the
encrypted form of the pooled Mahalanobis score of docs/secure-aggregation.md.
"""

from __future__ import annotations

import hmac
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crypto.ckks._tenseal import TsVector
from crypto.ckks.packing import EncryptedMatrix, Layout
from crypto.ckks.presets import CkksPreset
from crypto.errors import ContextMismatch, ParameterInvalid

__all__ = [
    "integer_weights",
    "max_score_gain",
    "quadratic_score",
    "score_factor",
    "weighted_sum",
]

logger = logging.getLogger(__name__)


def _check_weights(weights: Sequence[float], n: int) -> NDArray[np.float64]:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,):
        raise ParameterInvalid(f"weights must hold one value per upload ({n}), got {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ParameterInvalid("weights must be finite and nonnegative")
    if abs(float(w.sum()) - 1.0) > 1e-9:
        raise ParameterInvalid(f"weights must sum to 1, got {float(w.sum())!r}")
    return w


def integer_weights(weights: Sequence[float], bits: int) -> list[int]:
    """Round ``weights * 2^bits`` to integers summing to exactly ``2^bits``.

    Largest-remainder rounding: every integer is the floor or the ceiling of
    its exact value, so each weight moves by less than ``2^-bits``.
    """
    w = _check_weights(weights, len(weights))
    total = 1 << bits
    exact = w * total
    ints = np.floor(exact).astype(np.int64)
    short = total - int(ints.sum())
    order = np.argsort(-(exact - ints), kind="stable")
    ints[order[:short]] += 1
    return [int(x) for x in ints]


def _naf(value: int) -> list[int]:
    """Non-adjacent form, least significant digit first (digits in {-1, 0, 1})."""
    digits = []
    while value:
        if value & 1:
            d = 2 - (value & 3)
            value -= d
        else:
            d = 0
        digits.append(d)
        value >>= 1
    return digits


def _combine(vectors: Sequence[TsVector], ints: Sequence[int]) -> TsVector:
    """Evaluate ``sum_k ints[k] * vectors[k]`` with doublings and additions."""
    nafs = [_naf(x) for x in ints]
    acc: Any = None
    for bit in range(max(len(d) for d in nafs) - 1, -1, -1):
        if acc is not None:
            acc.add_(acc)
        for vector, digits in zip(vectors, nafs, strict=True):
            d = digits[bit] if bit < len(digits) else 0
            if d == 0:
                continue
            if acc is None:
                acc = vector.neg()
                if d > 0:
                    acc.neg_()
            elif d > 0:
                acc.add_(vector)
            else:
                acc.sub_(vector)
    return acc


def _check_uploads(uploads: Sequence[EncryptedMatrix]) -> EncryptedMatrix:
    if not uploads:
        raise ParameterInvalid("uploads must not be empty")
    first = uploads[0]
    for i, up in enumerate(uploads):
        if not isinstance(up, EncryptedMatrix) or up.kind != "upload":
            raise ParameterInvalid(f"uploads[{i}] is not an encrypted upload")
        if up.preset is not first.preset or not hmac.compare_digest(
            up.fingerprint, first.fingerprint
        ):
            raise ContextMismatch(f"uploads[{i}] belongs to another key epoch or preset")
        if up.layout != first.layout:
            raise ParameterInvalid(f"uploads[{i}] has another shape than uploads[0]")
    return first


def weighted_sum(uploads: Sequence[EncryptedMatrix], weights: Sequence[float]) -> EncryptedMatrix:
    """Encrypted ``sum_k w_k X_k`` over participants' uploads (aggregator side).

    Parameters
    ----------
    uploads
        Validated uploads of one key epoch and one shape.
    weights
        Public nonnegative weights summing to 1, one per upload.

    Returns
    -------
    EncryptedMatrix
        ``kind="aggregate"``; decrypt with :func:`crypto.ckks.decrypt_aggregate`.

    Raises
    ------
    ParameterInvalid
        Empty uploads, mixed shapes or invalid weights.
    ContextMismatch
        Uploads from different key epochs or presets.
    """
    first = _check_uploads(uploads)
    w = _check_weights(weights, len(uploads))
    preset = first.preset
    out: list[TsVector] = []
    if preset.weight_encoding == "integer":
        ints = integer_weights(w.tolist(), preset.weight_bits)
        for pos in range(first.layout.count):
            out.append(_combine([up.vectors[pos] for up in uploads], ints))
        bits = preset.weight_bits
    else:
        fix = preset.rescale_factor(preset.data_primes)
        for pos in range(first.layout.count):
            acc: Any = None
            for up, wk in zip(uploads, w.tolist(), strict=True):
                if wk == 0.0:
                    continue
                term = up.vectors[pos] * (wk * fix)
                acc = term if acc is None else acc.add_(term)
            out.append(acc)
        bits = 0
    logger.info("weighted sum of %d uploads (%s)", len(uploads), preset.name)
    return EncryptedMatrix(
        kind="aggregate",
        preset=preset,
        fingerprint=first.fingerprint,
        layout=first.layout,
        vectors=out,
        weight_bits=bits,
        contributors=len(uploads),
    )


def _check_plain(center: Any, whitening: Any, layout: Layout) -> tuple[NDArray[np.float64], ...]:
    mu = np.asarray(center, dtype=np.float64)
    lt = np.asarray(whitening, dtype=np.float64)
    if mu.shape != (layout.n_samples, layout.n_classes):
        raise ParameterInvalid(f"center must have shape {(layout.n_samples, layout.n_classes)}")
    if lt.shape != (layout.n_classes, layout.n_classes):
        raise ParameterInvalid(f"whitening must be {layout.n_classes}x{layout.n_classes}")
    if not (np.isfinite(mu).all() and np.isfinite(lt).all()):
        raise ParameterInvalid("center and whitening must be finite")
    return mu, lt


def score_factor(n_samples: int) -> float:
    """Factor ``f = n^-1/4`` applied to ``L``; the decrypted sum equals ``f^2 n`` times the mean."""
    return float(n_samples**-0.25)


def max_score_gain(preset: CkksPreset, n_classes: int, n_samples: int) -> float:
    """Largest ``||L||_2^2`` a score over ``n_samples`` rows can use without wrapping.

    For deviations ``|p - mu| <= 2 B`` per entry (``B = preset.input_bound``; the
    hidden-centre form ``m p - sum_j p_j`` with ``1/m`` folded into ``L`` gives
    the same bound), the slot sum of ``||L (p_i - mu_i)||^2``, scaled by
    :func:`score_factor` and the rescale factors, stays below the room of the
    last prime (``2^(q_0 - scale - 2)``, the headroom checks' limit) whenever
    ``||L||_2^2`` is below the returned value. A whitening ``W`` with
    ``W^T W = H^T P^-1 H`` has ``||W||_2^2 = 1 / lambda_min(P)``, so flooring the
    eigenvalues of ``P`` at ``1 / max_score_gain`` makes every score fit.

    Raises
    ------
    ParameterInvalid
        A preset without depth 2 or counts below 1.
    """
    if preset.depth < 2 or n_classes < 1 or n_samples < 1:
        raise ParameterInvalid(f"scores need a depth-2 preset and counts >= 1, got {preset.name}")
    top = preset.data_primes
    factors = preset.rescale_factor(top) ** 2 * preset.rescale_factor(top - 1)
    room = 2.0 ** (preset.coeff_mod_bit_sizes[0] - preset.scale_bits - 2)
    per_gain = score_factor(n_samples) ** 2 * n_samples * factors * n_classes
    return room / (per_gain * (2.0 * preset.input_bound) ** 2)


def _check_headroom(preset: CkksPreset, mu: NDArray[np.float64], lt: NDArray[np.float64]) -> None:
    """Refuse inputs whose worst-case score could wrap modulo the last prime."""
    worst_diff = preset.input_bound + float(np.abs(mu).max())
    per_sample = float(np.linalg.norm(lt, 2)) ** 2 * lt.shape[1] * worst_diff**2
    bound = per_sample * mu.shape[0]  # lt already carries f (and ~1 rescale factors)
    room = 2.0 ** (preset.coeff_mod_bit_sizes[0] - preset.scale_bits - 2)
    if bound >= room:
        raise ParameterInvalid(
            f"whitening is too large: the worst-case score {bound:.3g} would exceed the "
            f"{room:.3g} the last prime can hold; rescale the inputs or regularize Sigma"
        )


def quadratic_score(upload: EncryptedMatrix, center: Any, whitening: Any) -> EncryptedMatrix:
    """Encrypted ``mean_i || L (p_i - mu_i) ||^2`` over all samples ``i`` of one upload.

    Parameters
    ----------
    upload
        One participant's upload under a preset with depth >= 2 and Galois keys.
    center
        ``[N_pub, C]`` plaintext per-sample center (the revealed aggregate mean).
    whitening
        ``[C, C]`` plaintext matrix ``L`` with ``L^T L = Sigma^-1``.

    Returns
    -------
    EncryptedMatrix
        ``kind="score"`` holding one encrypted scalar, ``sqrt(N_pub)`` times the
        mean squared whitened distance (``L`` is pre-scaled by ``N_pub^-1/4``);
        :func:`crypto.ckks.decrypt_score` returns the mean.

    Raises
    ------
    ParameterInvalid
        Wrong shapes, non-finite inputs, a preset without the depth or keys, or
        a whitening so large that the worst-case score could overflow.
    """
    preset = upload.preset
    if upload.kind != "upload" or preset.depth < 2 or not preset.galois_keys:
        raise ParameterInvalid(
            f"quadratic_score needs a fresh upload under a depth-2 preset "
            f"with Galois keys; {preset.name} is not one"
        )
    layout = upload.layout
    mu, lt = _check_plain(center, whitening, layout)
    top = preset.data_primes
    # n^-1/4 keeps the slot sums well below the last prime while the squared
    # values stay far above the rescaling noise (measured: ~3e-6 relative error
    # versus ~3e-4 with 1/sqrt(n)); the rescale factors cancel TenSEAL's scale
    # reset (see CkksPreset.rescale_factor).
    lt = lt * score_factor(layout.n_samples) * preset.rescale_factor(top)
    lt = lt * math.sqrt(preset.rescale_factor(top - 1))
    _check_headroom(preset, mu, lt)
    total: Any = None
    for chunk in range(layout.chunks):
        start, stop = layout.run(chunk)
        diffs = [
            upload.vectors[layout.index(c, chunk)] - mu[start:stop, c].tolist()
            for c in range(layout.n_classes)
        ]
        squares: Any = None
        for row in lt:
            z: Any = None
            for coef, diff in zip(row.tolist(), diffs, strict=True):
                if coef == 0.0 or not math.isfinite(coef):
                    continue
                term = diff * coef
                z = term if z is None else z.add_(term)
            if z is None:
                continue
            z.square_()
            squares = z if squares is None else squares.add_(z)
        if squares is None:
            raise ParameterInvalid("whitening must not be all zeros")
        part = squares.sum()
        total = part if total is None else total.add_(part)
    return EncryptedMatrix(
        kind="score", preset=preset, fingerprint=upload.fingerprint, layout=layout, vectors=[total]
    )
