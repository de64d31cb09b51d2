"""Per-sample pooled Mahalanobis scores of participants' predictions (plaintext reference).

Implements the scoring scheme of docs/secure-aggregation.md as the linear
algebra every mode runs, so the plaintext, CKKS and secret-share modes differ
only in *where* each step happens:

1. reveal the equal-weight mean ``p̄_i`` of a participant set (an aggregate);
2. reveal the centred pooled second moment
   ``M = sum_k sum_{i<S} (p_ki - p̄_i)(p_ki - p̄_i)^T`` (``C x C``, an aggregate over
   participants and the first ``S`` public samples; centring on the revealed
   mean avoids the cancellation of ``E[pp^T] - p̄p̄^T``) and form ``Σ = M / (K S)``;
3. whiten: ``W`` with ``W^T W = H^T (H Σ H^T + ρ I)^-1 H``, ``H`` the ``(C-1) x C``
   Helmert basis of the sum-zero subspace (:func:`whitening` picks a sparse ``W``);
4. per participant, under encryption or on shares: ``z_i = W (p_ki - p̄_i)``,
   square, add over classes, mean over the ``N`` samples:
   ``s_k = mean_i z_i^T z_i = mean_i (p_ki - p̄_i)^T H^T (HΣH^T)^-1 H (p_ki - p̄_i)``.
   Only ``s_k`` (one scalar) is revealed.

Why the projection: logits are defined up to a per-sample additive constant and
centred logits (or probabilities) sum to a constant, so ``Σ`` is singular or
nearly so along the all-ones direction. ``H`` is a fixed,
public orthonormal basis of the complement of that direction (Helmert 1876;
Lancaster, "The Helmert matrices", Amer. Math. Monthly 1965), which removes it
exactly; the small ridge ``ρ`` (relative to the mean eigenvalue) guards the rest.
Under the pooled model an honest participant's score has expectation ``C - 1``.

Robustness: Σ pooled over everyone is inflated by attackers (masking), so
:func:`pooled_mahalanobis` re-estimates the mean and Σ from the ``h`` lowest
scores and rescores everybody: a C-step of FAST-MCD (Rousseeuw and Van
Driessen, Technometrics 1999), applied to participants instead of samples.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from secure_fed.errors import ScoringInvalid

__all__ = [
    "DEFAULT_MOMENT_SAMPLES",
    "PlainBackend",
    "ScoreReport",
    "ScoringBackend",
    "ScoringConfig",
    "class_pairs",
    "symmetric_from_pairs",
    "helmert_basis",
    "pooled_covariance",
    "pooled_mahalanobis",
    "quadratic_scores",
    "whitening",
]

_log = logging.getLogger(__name__)

#: Public samples used for the second moments: one CKKS_SCORING ciphertext (N/2 slots).
DEFAULT_MOMENT_SAMPLES = 4096


def helmert_basis(num_classes: int) -> np.ndarray:
    """Return the ``(C-1) x C`` Helmert basis: orthonormal rows, each orthogonal to ``1``.

    Raises
    ------
    ScoringInvalid
        If ``num_classes < 2``.
    """
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ScoringInvalid(f"num_classes must be an integer >= 2, got {num_classes!r}")
    h = np.zeros((num_classes - 1, num_classes), dtype=np.float64)
    for j in range(num_classes - 1):
        norm = math.sqrt((j + 1) * (j + 2))
        h[j, : j + 1] = 1.0 / norm
        h[j, j + 1] = -(j + 1) / norm
    return h


def pooled_covariance(*, second_moment: np.ndarray, count: int, samples: int) -> np.ndarray:
    """Pooled within-sample covariance ``M / (K S)`` from a revealed centred second moment.

    Parameters
    ----------
    second_moment
        ``C x C`` sum over ``count`` participants and the first ``samples`` samples of
        ``(p_ki - p̄_i)(p_ki - p̄_i)^T`` (centred on the revealed mean: no cancellation).
    count
        Number of participants ``K`` in the sum (>= 1).
    samples
        Number of samples ``S`` in the sum (>= 1).

    Raises
    ------
    ScoringInvalid
        On a non-square or non-finite matrix or non-positive counts.
    """
    m2 = np.asarray(second_moment, dtype=np.float64)
    if m2.ndim != 2 or m2.shape[0] != m2.shape[1] or not np.isfinite(m2).all():
        raise ScoringInvalid(f"second_moment must be a finite square matrix, got {m2.shape}")
    if samples < 1 or count < 1:
        raise ScoringInvalid(f"samples and count must be >= 1, got {samples}, {count}")
    cov = m2 / (count * samples)
    return (cov + cov.T) / 2.0


def whitening(cov: np.ndarray, *, ridge: float) -> np.ndarray:
    """Return a ``(C-1) x C`` matrix ``W`` with ``W^T W = H^T (H Σ H^T + ρ I)^-1 H``.

    ``ρ = ridge * trace(H Σ H^T) / (C - 1)``. Any ``W`` with that product gives
    the same scores; this one is ``L B`` with ``B`` the differences to the last
    class (``e_j - e_{C-1}``, same null space as ``H``) and ``L`` upper
    triangular (Cholesky), so row ``j`` has only ``C - j`` non-zeros: 54 instead
    of 90 plaintext-scalar multiplies per ciphertext run for ``C = 10``.

    Raises
    ------
    ScoringInvalid
        If ``cov`` is not a finite square matrix or the projected covariance is not
        positive definite even after the ridge.
    """
    sigma = np.asarray(cov, dtype=np.float64)
    if sigma.ndim != 2 or sigma.shape[0] != sigma.shape[1] or not np.isfinite(sigma).all():
        raise ScoringInvalid(f"covariance must be a finite square matrix, got {sigma.shape}")
    c = sigma.shape[0]
    h = helmert_basis(c)
    proj = h @ sigma @ h.T
    proj += ridge * max(float(np.trace(proj)) / (c - 1), 1e-12) * np.eye(c - 1)
    values, vectors = np.linalg.eigh(proj)
    if not (np.isfinite(values).all() and values.min() > 0):
        raise ScoringInvalid("projected covariance is not positive definite")
    precision = h.T @ ((vectors / values) @ vectors.T) @ h
    diff = np.hstack([np.eye(c - 1), -np.ones((c - 1, 1))])
    gram_inv = np.linalg.inv(diff @ diff.T)
    q = gram_inv @ diff @ precision @ diff.T @ gram_inv
    upper = np.linalg.cholesky((q + q.T) / 2.0).T
    return np.asarray(upper @ diff, dtype=np.float64)


def quadratic_scores(
    predictions: Mapping[str, np.ndarray], center: np.ndarray, whiten: np.ndarray
) -> dict[str, float]:
    """Return ``mean_i || W (p_ki - center_i) ||^2`` per participant (float64)."""
    c = np.asarray(center, dtype=np.float64)
    w = np.asarray(whiten, dtype=np.float64)
    out = {}
    for pid, p in predictions.items():
        z = (np.asarray(p, dtype=np.float64) - c) @ w.T
        out[pid] = float(np.mean(np.sum(z * z, axis=1)))
    return out


class ScoringBackend(Protocol):
    """The three revealing steps a mode must offer (plaintext, CKKS, shares).

    Every method reveals only an aggregate over ``ids`` or one scalar per id.
    A mode builds one backend per round
    (:meth:`secure_fed.secure.mode.SecureAggregator.scoring_round`) holding
    that round's uploads and round id; it is discarded once the scores are known.
    """

    def mean(self, ids: Sequence[str]) -> np.ndarray:
        """Revealed equal-weight mean ``[N, C]`` over ``ids``."""
        ...

    def second_moment(self, ids: Sequence[str], samples: int, center: np.ndarray) -> np.ndarray:
        """Revealed ``C x C`` sum of ``(p - c)(p - c)^T`` over ``ids`` and the first ``samples``."""
        ...

    def scores(
        self, ids: Sequence[str], center: np.ndarray, whiten: np.ndarray, samples: int | None = None
    ) -> dict[str, float]:
        """Revealed ``mean_{i<samples} ||W (p_ki - center_i)||^2``, one scalar per id."""
        ...


class PlainBackend:
    """Reference backend on plaintext float64 matrices (tests and the plaintext mode)."""

    def __init__(self, predictions: Mapping[str, np.ndarray]) -> None:
        self.predictions = {p: np.asarray(m, dtype=np.float64) for p, m in predictions.items()}

    def mean(self, ids: Sequence[str]) -> np.ndarray:
        """Equal-weight mean over ``ids``."""
        return np.asarray(np.mean([self.predictions[p] for p in ids], axis=0), dtype=np.float64)

    def second_moment(self, ids: Sequence[str], samples: int, center: np.ndarray) -> np.ndarray:
        """Centred second moment over ``ids`` and the first ``samples`` samples."""
        c = np.asarray(center, dtype=np.float64)[:samples]
        out = np.zeros((c.shape[1], c.shape[1]))
        for pid in ids:
            d = self.predictions[pid][:samples] - c
            out += d.T @ d
        return out

    def scores(
        self, ids: Sequence[str], center: np.ndarray, whiten: np.ndarray, samples: int | None = None
    ) -> dict[str, float]:
        """Mean whitened squared distance per id over the first ``samples`` samples."""
        rows = slice(0, samples)
        return quadratic_scores(
            {p: self.predictions[p][rows] for p in ids}, np.asarray(center)[rows], whiten
        )


@dataclass(frozen=True, kw_only=True)
class ScoringConfig:
    """Parameters of :func:`pooled_mahalanobis` (defaults documented in docs/secure-aggregation.md).

    Parameters
    ----------
    moment_samples
        ``S``: public samples in the second moments (capped at ``N``); 4096 is one
        CKKS_SCORING ciphertext. ``> 0``.
    ridge
        Relative ridge ``ρ`` added to the projected covariance, in ``[0, 1)``.
    c_steps
        Re-estimations from the lowest-scoring subset, in ``[0, 5]``.
    subset_fraction
        ``h = ceil(subset_fraction * (K + 1))`` participants define the robust
        centre (0.5 is MCD's maximal breakdown), in ``(0, 1]``.
    min_subset
        Lower bound on ``h`` (set it to the key authority's ``min_participants``).
    """

    moment_samples: int = DEFAULT_MOMENT_SAMPLES
    ridge: float = 1e-6
    c_steps: int = 1
    subset_fraction: float = 0.5
    min_subset: int = 2

    def __post_init__(self) -> None:
        checks = [
            ("moment_samples", isinstance(self.moment_samples, int) and self.moment_samples > 0),
            ("ridge", math.isfinite(self.ridge) and 0 <= self.ridge < 1),
            ("c_steps", isinstance(self.c_steps, int) and 0 <= self.c_steps <= 5),
            ("subset_fraction", 0 < self.subset_fraction <= 1),
            ("min_subset", isinstance(self.min_subset, int) and self.min_subset >= 1),
        ]
        for name, ok in checks:
            if not ok:
                raise ScoringInvalid(f"{name} is out of range: {getattr(self, name)!r}")

    def subset_size(self, count: int) -> int:
        """``h`` for ``count`` participants."""
        h = math.ceil(self.subset_fraction * (count + 1))
        return min(count, max(self.min_subset, h))


@dataclass(frozen=True)
class ScoreReport:
    """Result of :func:`pooled_mahalanobis`.

    Attributes
    ----------
    scores
        One score per participant (expectation ``C - 1`` for a typical honest one).
    subset
        Participants whose mean and covariance defined the final scores.
    dof
        Degrees of freedom ``C - 1`` of one sample's quadratic form.
    covariance
        The final pooled ``C x C`` covariance (an aggregate statistic).
    """

    scores: dict[str, float]
    subset: tuple[str, ...]
    dof: int
    covariance: np.ndarray


def pooled_mahalanobis(
    backend: ScoringBackend,
    ids: Sequence[str],
    *,
    num_samples: int,
    config: ScoringConfig | None = None,
) -> ScoreReport:
    """Score every participant in ``ids``, robustly.

    With ``c_steps = 0`` the mean and covariance are pooled over everybody. With
    ``c_steps >= 1`` a cheap first pass ranks participants by their mean squared
    Euclidean distance from the mean over the first ``S`` samples (``W = I``, no
    covariance needed; in CKKS one ciphertext run, no plaintext multiplies
    beyond 1.0), then each C-step re-estimates mean and covariance from the
    ``h`` lowest of the previous ranking and rescores everyone on all ``N``
    samples with the Mahalanobis metric.

    Raises
    ------
    ScoringInvalid
        If fewer than two participants are given or the covariance degenerates.
    """
    cfg = config or ScoringConfig()
    order = sorted(ids)
    if len(order) < 2 or len(set(order)) != len(order):
        raise ScoringInvalid(f"need at least two distinct participants to score, got {order}")
    samples = min(cfg.moment_samples, num_samples)
    subset = order
    if cfg.c_steps:
        mean = backend.mean(order)
        first = backend.scores(order, mean, np.eye(mean.shape[1]), samples)
        subset = _lowest(first, cfg.subset_size(len(order)))
    for step in range(max(cfg.c_steps, 1)):
        mean = backend.mean(subset)
        moment = backend.second_moment(subset, samples, mean)
        cov = pooled_covariance(second_moment=moment, count=len(subset), samples=samples)
        scores = backend.scores(order, mean, whitening(cov, ridge=cfg.ridge))
        if step + 1 < cfg.c_steps:
            new = _lowest(scores, cfg.subset_size(len(order)))
            if new == subset:
                break
            subset = new
    return ScoreReport(scores=scores, subset=tuple(subset), dof=cov.shape[0] - 1, covariance=cov)


def _lowest(scores: Mapping[str, float], h: int) -> list[str]:
    return sorted(sorted(scores, key=lambda p: (scores[p], p))[:h])


def class_pairs(num_classes: int) -> list[tuple[int, int]]:
    """Class pairs ``(a, b)`` with ``a <= b`` in row-major order: the moment layout."""
    return [(a, b) for a in range(num_classes) for b in range(a, num_classes)]


def symmetric_from_pairs(values: np.ndarray, num_classes: int) -> np.ndarray:
    """Fill a symmetric ``C x C`` matrix from values laid out as :func:`class_pairs`."""
    out = np.zeros((num_classes, num_classes))
    for v, (a, b) in zip(values, class_pairs(num_classes), strict=True):
        out[a, b] = out[b, a] = v
    return out
