"""The local steps both shares-mode servers run on their own shares (party 0 or 1).

Linear steps are local (additive sharing commutes with linear maps); the squares
of the whitened deviations and the second-moment products need one Beaver
multiplication per element (Beaver, CRYPTO 1991; ``crypto.shares``). Fixed-point
scales follow SecureML (Mohassel and Zhang, IEEE S&P 2017): predictions carry
``f = 12`` fractional bits, public weights 16, the whitening matrix ``g`` bits
chosen per round; products are truncated locally (Theorem 1 of SecureML) with
the bit budget proven in :func:`score_plan` so no sum can wrap the ring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from crypto.shares import RING_PREDICTIONS, RING_WEIGHTS
from crypto.shares.linear import matmul_public, sub_public, sum_axis, truncate
from secure_fed.errors import ScoringInvalid
from secure_fed.secure.scoring.mahalanobis import class_pairs

__all__ = [
    "ScorePlan",
    "center_shares",
    "centred_difference",
    "check_moment_room",
    "evidence_bound",
    "moment_sums",
    "pair_factors",
    "score_plan",
    "score_sums",
    "weighted_share",
    "whiten_shares",
]

CODEC = RING_PREDICTIONS
_W_PRECISION_BITS = 14
_SIGNED_BITS = 62


def weighted_share(shares: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """Return this party's share of ``sum_k w_k x_k`` (``f + 16`` fractional bits)."""
    out = np.zeros_like(shares[0])
    encoded = RING_WEIGHTS.encode(np.asarray(weights, dtype=np.float64).reshape(-1))
    for share, w in zip(shares, encoded, strict=True):
        out += share * w
    return out


def evidence_bound(rows: int, classes: int) -> int:
    """Largest ``|sum(mask * x)|`` of one upload's evidence, for its MAC-checked opening.

    The mask is ``C 1[c = y_i] - 1`` on ``rows`` rows: ``2 (C - 1)`` in absolute value
    per row, times ``B 2^f`` per value (``B = 8``, ``f = 12``).
    """
    return int(rows * 2 * (classes - 1) * CODEC.clip_bound * 2**CODEC.frac_bits) + 1


def center_shares(share: np.ndarray, center: np.ndarray, *, party: int) -> np.ndarray:
    """Share of ``x - c`` for a public real centre ``c`` (party 0 subtracts it)."""
    return sub_public(share, CODEC.encode_clipped(center), party=party)


def centred_difference(share: np.ndarray, group: list[np.ndarray]) -> np.ndarray:
    """Share of ``m x - sum_{j in group} x_j`` (``m = len(group)``): a hidden centre.

    Integer scalars only, so both parties compute it locally and exactly; the
    ``1/m`` goes into the public whitening (or the opened value's scale).
    """
    out = share * np.uint64(len(group))
    for other in group:
        out = out - other
    return out


def check_moment_room(count: int, samples: int) -> None:
    """Refuse a subset whose worst-case second moment could wrap the ring.

    ``|m x - sum x| <= 2 m B`` with ``f`` fractional bits; ``m`` participants'
    ``samples`` products of two such values must stay below ``2^62``.

    Raises
    ------
    ScoringInvalid
        If ``count`` and ``samples`` are too large for the 64-bit ring.
    """
    worst = 2.0 * count * CODEC.clip_bound * 2.0**CODEC.frac_bits
    if math.log2(count * samples) + 2 * math.log2(worst) >= _SIGNED_BITS:
        raise ScoringInvalid(f"second moments of {count} participants could wrap the ring")


def pair_factors(deltas: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Stack ``(d_a, d_b)`` for every class pair ``a <= b`` of every participant."""
    c = deltas[0].shape[1]
    pairs = class_pairs(c)
    left = np.concatenate([d[:, [a for a, _ in pairs]].T.reshape(-1) for d in deltas])
    right = np.concatenate([d[:, [b for _, b in pairs]].T.reshape(-1) for d in deltas])
    return left, right


def moment_sums(products: np.ndarray, *, count: int, pairs: int, samples: int) -> np.ndarray:
    """Sum flat pair products over participants and samples: ``pairs`` shares."""
    return sum_axis(
        products.reshape(count, pairs, samples).transpose(1, 0, 2).reshape(pairs, -1), axis=1
    )


def score_sums(squares: np.ndarray, *, count: int) -> np.ndarray:
    """Sum flat squares per participant: ``count`` shares (one scalar each)."""
    return sum_axis(squares.reshape(count, -1), axis=1)


@dataclass(frozen=True)
class ScorePlan:
    """Public fixed-point plan of the whitened score (no value can wrap the ring)."""

    matrix: np.ndarray  # uint64 ring encoding of W (g fractional bits)
    g: int
    fz: int

    @property
    def shift(self) -> int:
        """Bits dropped after ``W d``: from ``f + g`` down to ``fz``."""
        return CODEC.frac_bits + self.g - self.fz


def score_plan(whiten: np.ndarray, *, n_samples: int, input_scale: int = 1) -> ScorePlan:
    """Choose ``g`` (bits of W) and ``fz`` (bits of z) so ``sum_i ||z_i||^2`` fits 62 bits.

    ``|z_c| <= 2B * max_r sum_c |W_rc|`` for clipped inputs; the per-participant
    sum of ``N * R`` squares with ``2 fz`` fractional bits must stay below
    ``2^62``: ``fz = floor((62 - log2(N R) - 2 log2 zmax) / 2)``, at most ``f``.
    ``input_scale = m`` when the deviations are ``m x - sum_j x_j`` (``W``
    then carries the ``1/m``).

    Raises
    ------
    ScoringInvalid
        If ``W`` is not finite or even ``fz = 0`` could wrap.
    """
    w = np.asarray(whiten, dtype=np.float64)
    if w.ndim != 2 or not np.isfinite(w).all() or not np.abs(w).max() > 0:
        raise ScoringInvalid("whitening matrix must be finite, 2-D and non-zero")
    g = int(min(30, max(0, _W_PRECISION_BITS - math.ceil(math.log2(np.abs(w).max())))))
    ints = np.rint(w * 2.0**g).astype(np.int64)
    zmax = 2 * input_scale * CODEC.clip_bound * float(np.abs(ints).sum(axis=1).max()) / 2.0**g
    budget = _SIGNED_BITS - math.log2(n_samples * w.shape[0]) - 2 * math.log2(max(zmax, 1.0))
    fz = min(CODEC.frac_bits, math.floor(budget / 2))
    if fz < 0:
        raise ScoringInvalid(f"whitening too large for {n_samples} samples: scores could wrap")
    return ScorePlan(matrix=ints.astype(np.uint64), g=g, fz=fz)


def whiten_shares(delta: np.ndarray, plan: ScorePlan, *, party: int) -> np.ndarray:
    """Share of ``z = W d`` (``[N, R]``) with ``fz`` fractional bits (local truncation)."""
    return truncate(matmul_public(delta, plan.matrix), plan.shift, party=party)
