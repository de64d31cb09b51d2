"""Per-sample pooled Mahalanobis scores of participants' predictions (plaintext reference).

Implements the scoring scheme of docs/secure-aggregation.md as the linear
algebra every mode runs, so the plaintext, CKKS and secret-share modes differ
only in *where* each step happens. No mean is ever revealed: every centre is
the mean of a participant set that stays encrypted or shared (in CKKS and
shares mode ``m p_k - sum_{j in set} p_j`` with integer scalars, the ``1/m``
folded into the public whitening). What is revealed, per round:

1. ranking pass (``W = I``): ``mean_{i<S} ||p_ki - p̄_i||^2`` per participant,
   ``p̄`` the hidden mean of everybody; the robust subset ``H`` is the ``h``
   lowest;
2. ONE second-order release: the centred pooled second moment of ``H``,
   ``M = sum_{k in H} sum_{i<S} (p_ki - p̄H_i)(p_ki - p̄H_i)^T`` (``C x C``), and
   ``Σ = M / (h S)``;
3. whiten: ``W`` with ``W^T W = H^T (H Σ H^T + ρ I)^-1 H``, ``H`` the ``(C-1) x C``
   Helmert basis of the sum-zero subspace (:func:`whitening` picks a sparse ``W``);
4. final pass: ``s_k = mean_i ||W (p_ki - p̄H_i)||^2`` over all ``N`` samples, one
   scalar per participant.

Why the projection: logits are defined up to a per-sample additive constant and
centred logits (or probabilities) sum to a constant, so ``Σ`` is singular or
nearly so along the all-ones direction. ``H`` is a fixed,
public orthonormal basis of the complement of that direction (Helmert 1876;
Lancaster, "The Helmert matrices", Amer. Math. Monthly 1965), which removes it
exactly; the small ridge ``ρ`` (relative to the mean eigenvalue) guards the rest.
Under the pooled model an honest participant's score has expectation ``C - 1``.

Headroom: the scores must also be computable under encryption for *any*
upload within the public bound, however closely the honest participants
agree. With few participants whose predictions nearly coincide (after a round
of distillation, with a small public set) ``H Σ H^T`` has eigenvalues near 0
(about ``4e-4`` on digits), the relative ridge leaves them there, and ``W``
grows as ``1 / sqrt(lambda_min)`` until the worst-case CKKS score no longer
fits the last prime. Given the rows it scores, :func:`whitening` therefore
floors the eigenvalues at ``2 / max_score_gain`` of ``CKKS_SCORING`` (every
mode, so the modes keep scoring alike): a variance of about ``1.6e-3`` (a
standard deviation of 0.04 logits) for ``C = 10`` and ``N = 459``. A direction
honest participants agree on more closely than that is scored as if they
agreed to that precision; an upload deviating along it by ``delta`` still adds
``delta^2 / floor`` per sample.

Robustness: Σ pooled over everyone is inflated by attackers (masking), so
:func:`pooled_mahalanobis` estimates Σ from the ``h`` lowest ranking scores and
rescores everybody: one C-step of FAST-MCD (Rousseeuw and Van Driessen,
Technometrics 1999), applied to participants instead of samples. Only one
C-step: a second one would open a second covariance over another set.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from crypto.ckks.aggregate import max_score_gain
from crypto.ckks.presets import CKKS_SCORING
from secure_fed.errors import ScoringInvalid

__all__ = [
    "DEFAULT_MOMENT_SAMPLES",
    "PlainBackend",
    "ScoreReport",
    "ScoringBackend",
    "ScoringConfig",
    "class_pairs",
    "eigenvalue_floor",
    "symmetric_from_pairs",
    "helmert_basis",
    "lowest_scores",
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


#: Safety factor of the eigenvalue floor: ``||W||_2^2 <= max_score_gain / 2``.
HEADROOM_MARGIN = 2.0


def eigenvalue_floor(num_classes: int, rows: int) -> float:
    """Smallest eigenvalue :func:`whitening` leaves in ``H Σ H^T`` for scores over ``rows``.

    ``HEADROOM_MARGIN / max_score_gain(CKKS_SCORING, C, rows)``: with it, the
    worst-case encrypted score of any upload within the public bound fits the
    last prime by construction (:func:`crypto.ckks.aggregate.max_score_gain`).
    """
    return HEADROOM_MARGIN / max_score_gain(CKKS_SCORING, num_classes, rows)


def whitening(cov: np.ndarray, *, ridge: float, rows: int | None = None) -> np.ndarray:
    """Return a ``(C-1) x C`` matrix ``W`` with ``W^T W = H^T P^-1 H``, ``P = H Σ H^T + ρ I``.

    ``ρ = ridge * trace(H Σ H^T) / (C - 1)``; with ``rows`` (the rows the final
    scores average over) every eigenvalue of ``P`` is then raised to at least
    :func:`eigenvalue_floor` (see the module docstring). Any ``W`` with that product gives
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
    if rows is not None:
        values = np.maximum(values, eigenvalue_floor(c, rows))
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

    Every centre is the mean of a participant set that is never revealed. A
    mode builds one backend per round
    (:meth:`secure_fed.secure.mode.SecureAggregator.scoring_round`) holding
    that round's uploads, round id and release plan; it is discarded once the
    scores are known.
    """

    def ranking_scores(self, ids: Sequence[str], samples: int) -> dict[str, float]:
        """Revealed ``mean_{i<samples} ||p_ki - p̄_i||^2`` per id (``p̄``: hidden mean of ids)."""
        ...

    def moments(self, subset: Sequence[str], samples: int) -> np.ndarray:
        """Revealed ``C x C`` second moment of ``subset`` centred on its hidden mean."""
        ...

    def final_scores(
        self, ids: Sequence[str], subset: Sequence[str], whiten: np.ndarray
    ) -> dict[str, float]:
        """Revealed ``mean_i ||W (p_ki - p̄H_i)||^2`` per id over all samples, ``p̄H`` hidden."""
        ...


class PlainBackend:
    """Reference backend on plaintext float64 matrices (tests and the plaintext mode)."""

    def __init__(self, predictions: Mapping[str, np.ndarray]) -> None:
        self.predictions = {p: np.asarray(m, dtype=np.float64) for p, m in predictions.items()}

    def _mean(self, ids: Sequence[str]) -> np.ndarray:
        return np.asarray(np.mean([self.predictions[p] for p in ids], axis=0), dtype=np.float64)

    def ranking_scores(self, ids: Sequence[str], samples: int) -> dict[str, float]:
        """Mean squared Euclidean distance from the mean of ``ids`` (first ``samples``)."""
        rows = slice(0, samples)
        center = self._mean(ids)[rows]
        eye = np.eye(center.shape[1])
        return quadratic_scores({p: self.predictions[p][rows] for p in ids}, center, eye)

    def moments(self, subset: Sequence[str], samples: int) -> np.ndarray:
        """Second moment of ``subset`` centred on its mean, first ``samples`` samples."""
        c = self._mean(subset)[:samples]
        out = np.zeros((c.shape[1], c.shape[1]))
        for pid in subset:
            d = self.predictions[pid][:samples] - c
            out += d.T @ d
        return out

    def final_scores(
        self, ids: Sequence[str], subset: Sequence[str], whiten: np.ndarray
    ) -> dict[str, float]:
        """Mean whitened squared distance from the mean of ``subset``, all samples."""
        return quadratic_scores({p: self.predictions[p] for p in ids}, self._mean(subset), whiten)


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
        ``1``: rank first and estimate Σ on the lowest-ranked subset; ``0``: pool
        Σ over everybody. One C-step at most: a round opens one covariance.
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
            ("c_steps", isinstance(self.c_steps, int) and 0 <= self.c_steps <= 1),
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
    """Score every participant in ``ids``, robustly, opening no mean.

    With ``c_steps = 1`` a ranking pass scores everybody by the mean squared
    Euclidean distance from the (hidden) mean of all, over the first ``S``
    samples (``W = I``); the ``h`` lowest form the subset ``H``. With
    ``c_steps = 0``, ``H`` is everybody. Then the one covariance of ``H`` is
    opened and everybody is rescored on all ``N`` samples with the Mahalanobis
    metric, centred on ``H``'s hidden mean.

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
        first = backend.ranking_scores(order, samples)
        subset = lowest_scores(first, cfg.subset_size(len(order)))
    moment = backend.moments(subset, samples)
    cov = pooled_covariance(second_moment=moment, count=len(subset), samples=samples)
    whiten = whitening(cov, ridge=cfg.ridge, rows=num_samples)
    scores = backend.final_scores(order, subset, whiten)
    return ScoreReport(scores=scores, subset=tuple(subset), dof=cov.shape[0] - 1, covariance=cov)


def lowest_scores(scores: Mapping[str, float], h: int) -> list[str]:
    """Return the ``h`` ids with the lowest scores (ties by id), sorted by id."""
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
