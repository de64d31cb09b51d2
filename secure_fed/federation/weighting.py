"""Contribution-aware aggregation weights, the outlier factor, and entropy reduction.

One formula turns a round's scores and outlier decisions into the published
weights (:meth:`DynamicWeighting.weigh`; docs/federation.md, section 5):

    q_k      = 1 / (1 + s_k / median_j s_j)                         (quality)
    w_k^(t)  = softmax_k(alpha * q_k) * n_k / sum_j n_j             (then renormalised)
    d_k^(t)  = beta * d_k^(t-1) + (1 - beta) * w_k^(t)              (EMA, then renormalised)
    W_k^(t)  = f_k * d_k^(t) / sum_j f_j * d_j^(t)                  (published weight)

over the participants that were not excluded, where ``n_k`` is the declared
sample count, ``s_k`` the participant's distance score and ``f_k`` in ``(0, 1]``
the outlier policy's weight factor (excluded participants have ``f_k = 0`` and
weight 0). Contribution-weighted aggregation usually scores quality by
validation accuracy; the aggregator here has no labels and in the secure modes
sees only one distance score per participant, so the quality is derived from
that score, made scale-free by the median (1 for a participant exactly at the
aggregate, 1/2 for a typical one, towards 0 for an outlier). The EMA history
keeps ``d`` (before the factor), so the outlier policy's own score history is
the only memory of a down-weighting and a participant is not punished twice.

Entropy reduction follows DS-FL (Itahara et al., "Distillation-Based
Semi-Supervised Federated Learning", IEEE TMC 2021): the averaged soft labels
are sharpened with a temperature below 1 before distillation. On logits this
is a division by that temperature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from secure_fed.errors import WeightingInvalid

__all__ = [
    "DynamicWeighting",
    "WeightTerms",
    "apply_factors",
    "quality_from_scores",
    "sharpen_logits",
    "softmax_entropy",
]


def quality_from_scores(scores: Mapping[str, float]) -> dict[str, float]:
    """Map non-negative distance scores to qualities in ``(0, 1]`` (median-normalised).

    Raises
    ------
    WeightingInvalid
        If a score is negative or not finite.
    """
    for pid, s in scores.items():
        if not math.isfinite(s) or s < 0:
            raise WeightingInvalid(f"score of {pid!r} must be finite and >= 0, got {s!r}")
    if not scores:
        return {}
    median = float(np.median(list(scores.values())))
    if median <= 0:
        return {pid: 1.0 if s <= 0 else 0.0 for pid, s in scores.items()}
    return {pid: 1.0 / (1.0 + s / median) for pid, s in scores.items()}


def _check_factors(factors: Mapping[str, float]) -> None:
    for pid, f in factors.items():
        if not (math.isfinite(f) and 0 < f <= 1):
            raise WeightingInvalid(f"factor of {pid!r} must be in (0, 1], got {f!r}")


def apply_factors(dynamic: Mapping[str, float], factors: Mapping[str, float]) -> dict[str, float]:
    """Return the published weights ``f_k * d_k / sum_j f_j * d_j`` (sum to 1).

    Raises
    ------
    WeightingInvalid
        If the ids differ, a factor is outside ``(0, 1]`` or a weight is not positive.
    """
    if set(dynamic) != set(factors):
        raise WeightingInvalid("dynamic weights and factors name different participants")
    _check_factors(factors)
    for pid in factors:
        if not (math.isfinite(dynamic[pid]) and dynamic[pid] > 0):
            raise WeightingInvalid(f"weight of {pid!r} must be > 0, got {dynamic[pid]!r}")
    scaled = {pid: factors[pid] * w for pid, w in dynamic.items()}
    total = sum(scaled.values())
    return {pid: w / total for pid, w in scaled.items()}


@dataclass(frozen=True, kw_only=True)
class WeightTerms:
    """How one participant's published weight was formed (see the module formula)."""

    quality: float
    dynamic: float
    factor: float
    weight: float


@dataclass(kw_only=True)
class DynamicWeighting:
    """Sample count times softmax(alpha * quality), EMA-smoothed across rounds.

    Parameters
    ----------
    alpha
        Quality sensitivity (>= 0); 0 gives plain sample-count weights.
    beta
        EMA coefficient in ``[0, 1)``; 0 disables smoothing.
    history
        Smoothed weight of every participant seen so far (persisted state).
    """

    alpha: float = 5.0
    beta: float = 0.5
    history: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha) and 0 <= self.alpha <= 100):
            raise WeightingInvalid(f"alpha must be in [0, 100], got {self.alpha!r}")
        if not (math.isfinite(self.beta) and 0 <= self.beta < 1):
            raise WeightingInvalid(f"beta must be in [0, 1), got {self.beta!r}")

    def instant(
        self, sample_counts: Mapping[str, int], qualities: Mapping[str, float]
    ) -> dict[str, float]:
        """Return this round's un-smoothed weights (sum to 1).

        Raises
        ------
        WeightingInvalid
            On empty input, mismatched ids, non-positive counts or qualities outside [0, 1].
        """
        if not sample_counts:
            raise WeightingInvalid("sample_counts is empty")
        if set(sample_counts) != set(qualities):
            raise WeightingInvalid("sample_counts and qualities name different participants")
        for pid, n in sample_counts.items():
            if n <= 0:
                raise WeightingInvalid(f"sample count of {pid!r} must be >= 1, got {n!r}")
            q = qualities[pid]
            if not (math.isfinite(q) and 0 <= q <= 1):
                raise WeightingInvalid(f"quality of {pid!r} must be in [0, 1], got {q!r}")
        ids = sorted(sample_counts)
        logits = np.array([self.alpha * qualities[p] for p in ids])
        soft = np.exp(logits - logits.max())
        raw = soft / soft.sum() * np.array([sample_counts[p] for p in ids], dtype=np.float64)
        return {p: float(w) for p, w in zip(ids, raw / raw.sum(), strict=True)}

    def update(
        self, sample_counts: Mapping[str, int], qualities: Mapping[str, float]
    ) -> dict[str, float]:
        """Compute this round's weights, smooth them with the EMA history, and store them.

        A participant without history starts from its instant weight; the
        result is renormalised over this round's participants.
        """
        now = self.instant(sample_counts, qualities)
        smooth = {
            p: self.beta * self.history[p] + (1 - self.beta) * w if p in self.history else w
            for p, w in now.items()
        }
        total = sum(smooth.values())
        result = {p: w / total for p, w in smooth.items()}
        self.history.update(result)
        return result

    def weigh(
        self,
        sample_counts: Mapping[str, int],
        scores: Mapping[str, float],
        factors: Mapping[str, float],
    ) -> dict[str, WeightTerms]:
        """Return every term of this round's published weights; update the EMA history.

        ``sample_counts``, ``scores`` and ``factors`` name the participants that
        take part in the aggregate (the excluded ones are left out by the caller).

        Raises
        ------
        WeightingInvalid
            On mismatched ids or out-of-range inputs (nothing is updated then).
        """
        if not (set(sample_counts) == set(scores) == set(factors)):
            raise WeightingInvalid("sample_counts, scores and factors name different participants")
        _check_factors(factors)  # update() validates the rest before the history moves
        qualities = quality_from_scores(scores)
        dynamic = self.update(sample_counts, qualities)
        weights = apply_factors(dynamic, factors)
        return {
            pid: WeightTerms(
                quality=qualities[pid],
                dynamic=dynamic[pid],
                factor=factors[pid],
                weight=weights[pid],
            )
            for pid in sorted(weights)
        }


def sharpen_logits(logits: np.ndarray, *, temperature: float) -> np.ndarray:
    """DS-FL entropy reduction: divide logits by ``temperature`` in ``(0, 1]``.

    ``softmax(z / T)`` with ``T < 1`` lowers the entropy of the averaged soft
    labels; ``T = 1`` returns the input unchanged.

    Raises
    ------
    WeightingInvalid
        If ``temperature`` is outside ``(0, 1]``.
    """
    if not (math.isfinite(temperature) and 0 < temperature <= 1):
        raise WeightingInvalid(f"temperature must be in (0, 1], got {temperature!r}")
    return np.asarray(logits, dtype=np.float32) / np.float32(temperature)


def softmax_entropy(logits: np.ndarray) -> float:
    """Mean Shannon entropy (nats) of ``softmax(logits)`` over rows."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return float(-(p * np.log(np.clip(p, 1e-300, None))).sum(axis=1).mean())
