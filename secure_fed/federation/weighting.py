"""Contribution-aware aggregation weights, the outlier factor, the cap, and entropy reduction.

One formula turns a round's scores and outlier decisions into the published
weights (:meth:`DynamicWeighting.weigh`; docs/federation.md, section 5):

    q_k      = 1 / (1 + s_k / median_j s_j)                         (quality)
    w_k^(t)  = softmax_k(alpha * q_k)                               (instant weight)
    d_k^(t)  = beta * d_k^(t-1) + (1 - beta) * w_k^(t)              (EMA, then renormalised)
    v_k^(t)  = f_k * d_k^(t) / sum_j f_j * d_j^(t)                  (after the factor)
    W_k^(t)  = min(w_max, lambda * v_k^(t)), sum_k W_k^(t) = 1      (capped, published)

over the participants that were not excluded, where ``s_k`` is the
participant's distance score, ``f_k`` in ``(0, 1]`` the outlier policy's weight
factor (excluded participants have ``f_k = 0`` and weight 0) and ``w_max`` the
round's public cap on one participant's weight (:func:`cap_weights`). Weights
depend only on what the servers can check: the scores they computed and the
round's public parameters. A participant's self-declared sample count does not
enter them (an unverifiable claim of 1e9 rows would otherwise buy almost all of
the weight). Contribution-weighted aggregation usually scores quality by
validation accuracy; the aggregator here has no labels and in the secure modes
sees only one distance score per participant, so the quality is derived from
that score, made scale-free by the median (1 for a participant exactly at the
aggregate, 1/2 for a typical one, towards 0 for an outlier). The EMA history
keeps ``d`` (before the factor and the cap), so the outlier policy's own score
history is the only memory of a down-weighting and a participant is not
punished twice.

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
    "cap_weights",
    "check_cap",
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


def check_cap(cap: float, participants: int) -> None:
    """Refuse a cap outside ``(0, 1]`` or one ``participants`` weights cannot satisfy.

    Weights sum to 1, so ``n`` weights of at most ``cap`` exist only when
    ``n * cap >= 1``.

    Raises
    ------
    WeightingInvalid
        Naming the cap and the number of participants.
    """
    if isinstance(cap, bool) or not isinstance(cap, int | float):
        raise WeightingInvalid(f"max_weight must be a number, got {cap!r}")
    if not (math.isfinite(cap) and 0 < cap <= 1):
        raise WeightingInvalid(f"max_weight must be in (0, 1], got {cap!r}")
    if participants < 1 or participants * cap < 1 - 1e-12:
        raise WeightingInvalid(
            f"max_weight {cap!r} cannot be met by {participants} participants "
            f"(weights sum to 1: it must be >= 1/{participants})"
        )


def cap_weights(weights: Mapping[str, float], cap: float) -> dict[str, float]:
    """Return ``W_k = min(cap, lambda * v_k)`` summing to 1 (water-filling).

    ``weights`` are positive (``v_k``); ``lambda > 0`` is the one scale that
    makes the capped weights sum to 1. Computed by iterative capping: with
    ``F`` the capped set (empty at first), set
    ``lambda = (1 - cap |F|) / sum_{k not in F} v_k``; every ``k`` not in ``F``
    with ``lambda v_k > cap`` joins ``F``; stop when none does.

    Termination: each pass that does not stop adds at least one participant to
    ``F``, and ``F`` never shrinks, so there are at most ``n`` passes. ``F``
    never takes everybody while ``n * cap > 1``: the uncapped set ``U`` of the
    last pass has ``sum_U lambda v_k = 1 - cap |F| <= cap (n - |F|) = cap |U|``
    because ``n * cap >= 1``, so not every member of ``U`` can exceed ``cap``.
    When ``n * cap == 1`` (to 1e-12) every weight is ``1 / n``. Correctness:
    ``lambda`` only grows from pass to pass (the capped weights removed were
    above ``cap``, so the mass left per unit of ``v`` rises), hence a capped
    participant stays above ``cap`` under the final ``lambda`` and
    ``W_k = min(cap, lambda v_k)`` for all ``k``; no weight exceeds ``cap``
    (uncapped ones were checked against it) and the weights keep the order
    of ``v``.

    Raises
    ------
    WeightingInvalid
        If a weight is not positive and finite, or ``cap`` cannot be met.
    """
    check_cap(cap, len(weights))
    for pid, w in weights.items():
        if not (math.isfinite(w) and w > 0):
            raise WeightingInvalid(f"weight of {pid!r} must be > 0, got {w!r}")
    if len(weights) * cap <= 1 + 1e-12:
        return {pid: 1.0 / len(weights) for pid in weights}
    capped: set[str] = set()
    while True:
        free = {p: w for p, w in weights.items() if p not in capped}
        scale = (1.0 - cap * len(capped)) / math.fsum(free.values())
        over = {p for p, w in free.items() if scale * w > cap}
        if not over:
            break
        capped |= over
    return {p: cap if p in capped else scale * w for p, w in weights.items()}


@dataclass(frozen=True, kw_only=True)
class WeightTerms:
    """How one participant's published weight was formed (see the module formula).

    Attributes
    ----------
    quality
        ``q_k`` from the score.
    dynamic
        ``d_k``, the EMA-smoothed weight (before the factor and the cap).
    factor
        ``f_k``, the outlier policy's factor.
    weight
        ``W_k``, the published weight, at most ``max_weight``.
    max_weight
        The round's cap ``w_max``.
    """

    quality: float
    dynamic: float
    factor: float
    weight: float
    max_weight: float


@dataclass(kw_only=True)
class DynamicWeighting:
    """Softmax(alpha * quality), EMA-smoothed across rounds, then factor and cap.

    Parameters
    ----------
    alpha
        Quality sensitivity (>= 0); 0 gives equal weights.
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

    def instant(self, qualities: Mapping[str, float]) -> dict[str, float]:
        """Return this round's un-smoothed weights ``softmax(alpha * q)`` (sum to 1).

        Raises
        ------
        WeightingInvalid
            On empty input or qualities outside [0, 1].
        """
        if not qualities:
            raise WeightingInvalid("qualities is empty")
        for pid, q in qualities.items():
            if not (math.isfinite(q) and 0 <= q <= 1):
                raise WeightingInvalid(f"quality of {pid!r} must be in [0, 1], got {q!r}")
        ids = sorted(qualities)
        logits = np.array([self.alpha * qualities[p] for p in ids])
        soft = np.exp(logits - logits.max())
        return {p: float(w) for p, w in zip(ids, soft / soft.sum(), strict=True)}

    def update(self, qualities: Mapping[str, float]) -> dict[str, float]:
        """Compute this round's weights, smooth them with the EMA history, and store them.

        A participant without history starts from its instant weight; the
        result is renormalised over this round's participants.
        """
        now = self.instant(qualities)
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
        scores: Mapping[str, float],
        factors: Mapping[str, float],
        *,
        max_weight: float = 1.0,
    ) -> dict[str, WeightTerms]:
        """Return every term of this round's published weights; update the EMA history.

        ``scores`` and ``factors`` name the participants that take part in the
        aggregate (the excluded ones are left out by the caller). This is the
        one place the cap is applied: every returned ``weight`` is at most
        ``max_weight`` and they sum to 1 (:func:`cap_weights`).

        Raises
        ------
        WeightingInvalid
            On mismatched ids, out-of-range inputs or a cap the participants
            cannot meet (nothing is updated then).
        """
        if set(scores) != set(factors):
            raise WeightingInvalid("scores and factors name different participants")
        _check_factors(factors)
        check_cap(max_weight, len(scores))
        qualities = quality_from_scores(scores)
        dynamic = self.update(qualities)
        weights = cap_weights(apply_factors(dynamic, factors), max_weight)
        return {
            pid: WeightTerms(
                quality=qualities[pid],
                dynamic=dynamic[pid],
                factor=factors[pid],
                weight=weights[pid],
                max_weight=max_weight,
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
