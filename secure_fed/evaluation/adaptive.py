"""Adaptive attackers that have read this repository (evaluation only, never production).

Each attack is a coalition member that knows the weighting
(:mod:`secure_fed.federation.weighting`), the copy rule of every mode
(:mod:`secure_fed.secure.scoring.evidence`: ``copies_threshold`` of
``round_typical``; see :func:`copy_threshold`) and how the labeled evidence
slice is drawn, and forges its upload from
a :class:`RoundView`: its own honest predictions, the honest uploads of the
round (the coalition's strongest view, as in
:mod:`secure_fed.evaluation.collusion`: in the secure modes no party sees
them; the evaluation grants them to bound what an upload could achieve), and
its recomputation of the round's slice. Every upload is clipped to the public
bound.

Kinds (:data:`ADAPTIVE_REGISTRY`):

* ``slice_aware``: at the bound on the true class of every row of the
  recomputed slice (its top evidence buys merit 1), its own logits negated on
  every other row;
* ``threshold_inflate``: far-away colluders, each confidently on a different
  wrong class: they pull everybody's mean and every honest upload's distances
  up, to raise the copy threshold until honest uploads count as copies of each
  other (their copy factor ``1 / (1 + copies)`` falls) while the colluders, far
  from each other, count none. It raised the earlier shares rule (``2K/(K-1)``
  times the median ranking score) about fivefold; the rule every mode uses now
  (:func:`copy_threshold`) moves with neither far uploads nor this one:
* ``threshold_inside``: the adaptive answer to that rule: all colluders but
  the last far away (each on a wrong class at the bound) pull everybody's
  mean; the last sits beyond it, :data:`INSIDE_REACH` times as far from the
  honest mean: its ranking score is then among the lowest, it enters the
  robust subset and widens it (it raises the subset's mean pair distance
  four- to twelvefold, measured; the whitened estimate, and so the threshold,
  rose at most about twofold);
* ``jitter``: the negated honest mean plus independent noise per colluder,
  its per-cell sigma chosen so that pair distances ``2 sigma^2 C`` sit
  :data:`JITTER_MARGIN` times above the copy threshold the coalition
  estimates, within :data:`JITTER_SIGMA` (0.4 to 0.75);
* ``above_chance``: the adaptive answer to the weighting's chance rule (a merit
  capped at ``CHANCE_MERIT`` for evidence at or below 0): the ``jitter`` kind on
  all rows but a fixed :data:`MIX_FRACTION` of them, where it sends the honest
  mean (plus the same noise). Its evidence is then about ``2 x 0.6 - 1 = 0.2``
  times the honest mean's, above 0 on any slice, without knowing the slice;
* ``stealthy``: the honest mean (the smallest Mahalanobis distance) on every
  row but a chosen :data:`STEALTH_FRACTION` of them, where the top two classes
  of the mean are swapped, the new top raised :data:`STEALTH_MARGIN` noise
  sigmas above the old (a small change that flips the row's label); plus the
  ``jitter`` kind's noise, so that the colluders' uploads are neither
  identical (a reused payload is refused) nor copies.

Randomness here is simulation noise from a seeded ``numpy`` generator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from secure_fed.errors import AttackSpecInvalid, UnknownAttack
from secure_fed.secure.scoring.evidence import (
    EvidenceSlice,
    copies_threshold,
    round_typical,
)
from secure_fed.secure.scoring.mahalanobis import (
    PlainBackend,
    ScoringConfig,
    pooled_mahalanobis,
    whitening,
)

__all__ = [
    "ADAPTIVE_REGISTRY",
    "INSIDE_REACH",
    "JITTER_MARGIN",
    "MIX_FRACTION",
    "JITTER_SIGMA",
    "STEALTH_FRACTION",
    "STEALTH_MARGIN",
    "AdaptiveAttack",
    "RoundView",
    "copy_threshold",
    "forge",
    "jitter_sigma",
    "mixed_rows",
    "stealth_rows",
]

#: Per-cell noise range of the ``jitter`` kind.
JITTER_SIGMA = (0.4, 0.75)
#: The ``jitter`` kind aims its pair distances this many times above the threshold.
JITTER_MARGIN = 1.5
#: The ``threshold_inside`` colluder sits this many times as far from the honest mean as
#: everybody's mean is (on everybody's mean at 1; beyond it, farther from the honest ones).
INSIDE_REACH = 2.0
#: On a poisoned row the new top class leads by this many noise sigmas.
STEALTH_MARGIN = 4.0
#: Fraction of public rows the ``stealthy`` kind poisons.
STEALTH_FRACTION = 0.1
#: Fraction of public rows on which the ``above_chance`` kind sends the honest mean.
MIX_FRACTION = 0.6


@dataclass(frozen=True, kw_only=True)
class RoundView:
    """What one coalition member knows when it forges its upload.

    Attributes
    ----------
    round_id
        The round being uploaded to.
    own
        The member's honest ``[N, C]`` predictions.
    honest
        Every honest upload of the round (the coalition's view).
    index
        The member's position in the coalition, from 0.
    colluders
        Coalition size.
    bound
        Public logit bound.
    evidence
        The member's recomputation of the round's slice (None: it has none).
    seed
        Seed of the simulation noise.
    """

    round_id: int
    own: np.ndarray
    honest: Mapping[str, np.ndarray]
    index: int
    colluders: int
    bound: float
    evidence: EvidenceSlice | None
    seed: int = 0

    def rng(self) -> np.random.Generator:
        """Return the member's noise generator for this round (seeded)."""
        return np.random.default_rng([self.seed, self.round_id, self.index])

    def honest_mean(self) -> np.ndarray:
        """Mean of the honest uploads, float64."""
        return np.asarray(np.mean([self.honest[p] for p in sorted(self.honest)], axis=0))


#: ``view -> upload`` (clipped to the bound by :func:`forge`).
AdaptiveAttack = Callable[[RoundView], np.ndarray]


def _slice_aware(view: RoundView) -> np.ndarray:
    sent = -np.asarray(view.own, dtype=np.float64)
    if view.evidence is not None:
        rows = np.asarray(view.evidence.rows, dtype=np.int64)
        sent[rows] = -view.bound
        sent[rows, np.asarray(view.evidence.labels, dtype=np.int64)] = view.bound
    return sent


def _threshold_inflate(view: RoundView) -> np.ndarray:
    mean = view.honest_mean()
    classes = mean.shape[1]
    target = (mean.argmax(axis=1) + 1 + view.index) % classes
    sent = np.full_like(mean, -view.bound)
    sent[np.arange(len(mean)), target] = view.bound
    return sent


def _threshold_inside(view: RoundView) -> np.ndarray:
    mean = view.honest_mean()
    classes, rows = mean.shape[1], np.arange(len(mean))
    fars = []
    for j in range(max(1, view.colluders - 1)):  # all but the last are far
        far = np.full_like(mean, -view.bound)
        far[rows, (mean.argmax(axis=1) + 1 + j) % classes] = view.bound
        fars.append(far)
    if view.index < len(fars):
        return fars[view.index]
    # everybody's mean with the last one on it: (n mean + sum of the far ones) / (n + m - 1)
    honest = len(view.honest)
    centre = (honest * mean + np.sum(fars, axis=0)) / (honest + len(fars))
    return np.asarray(mean + INSIDE_REACH * (centre - mean), dtype=np.float64)


def copy_threshold(matrices: Mapping[str, np.ndarray], *, min_subset: int = 2) -> float:
    """Return the copy threshold every mode derives for these uploads.

    ``max(theta x typical, floor)`` with the typical distance of the round's
    scoring (:func:`~secure_fed.secure.scoring.evidence.round_typical` of what
    :func:`~secure_fed.secure.scoring.mahalanobis.pooled_mahalanobis` opens),
    ``min_subset`` the quorum the federation scores with.
    """
    ids = sorted(matrices)
    rows = len(np.asarray(matrices[ids[0]]))
    config = ScoringConfig(min_subset=max(2, min_subset))
    report = pooled_mahalanobis(PlainBackend(matrices), ids, num_samples=rows, config=config)
    typical = round_typical(
        covariance=report.covariance,
        subset=len(report.subset),
        scores=report.scores,
        whiten=whitening(report.covariance, ridge=config.ridge, rows=rows),
    )
    return copies_threshold(typical)


def jitter_sigma(threshold: float, classes: int) -> float:
    """Per-cell sigma whose pair distance ``2 sigma^2 C`` is ``JITTER_MARGIN`` x ``threshold``.

    Clipped to :data:`JITTER_SIGMA`.
    """
    wanted = float(np.sqrt(JITTER_MARGIN * threshold / (2.0 * classes)))
    return min(max(wanted, JITTER_SIGMA[0]), JITTER_SIGMA[1])


def _sigma(view: RoundView, base: np.ndarray) -> float:
    """Return the per-cell sigma that puts the coalition just above the copy threshold."""
    # the coalition's estimate, with its own uploads at the base (distinct bytes)
    probe = {**view.honest, **{f"~{j}": base + 1e-3 * j for j in range(view.colluders)}}
    return jitter_sigma(copy_threshold(probe), base.shape[1])


def _jitter(view: RoundView) -> np.ndarray:
    base = -view.honest_mean()
    return base + view.rng().normal(0.0, _sigma(view, base), size=base.shape)


def mixed_rows(rows: int, *, seed: int) -> np.ndarray:
    """Return the rows where the ``above_chance`` kind sends the honest mean (fixed per seed)."""
    count = max(1, int(round(MIX_FRACTION * rows)))
    return np.sort(np.random.default_rng([seed, 0xAC]).choice(rows, size=count, replace=False))


def _above_chance(view: RoundView) -> np.ndarray:
    mean = view.honest_mean()
    rows = mixed_rows(len(mean), seed=view.seed)
    base = -mean
    base[rows] = mean[rows]
    return base + view.rng().normal(0.0, _sigma(view, base), size=base.shape)


def stealth_rows(rows: int, *, seed: int) -> np.ndarray:
    """Return the rows the ``stealthy`` kind poisons (the same for every member and round)."""
    count = max(1, int(round(STEALTH_FRACTION * rows)))
    return np.sort(np.random.default_rng([seed, 0x57E]).choice(rows, size=count, replace=False))


def _stealthy(view: RoundView) -> np.ndarray:
    mean = view.honest_mean()
    sigma = _sigma(view, mean)
    sent = mean.copy()
    rows = stealth_rows(len(sent), seed=view.seed)
    order = np.argsort(sent[rows], axis=1)
    top, second = order[:, -1], order[:, -2]
    picked = sent[rows]
    idx = np.arange(len(rows))
    high = picked[idx, top]
    picked[idx, top] = picked[idx, second]
    picked[idx, second] = high + STEALTH_MARGIN * sigma  # the flip survives the noise
    sent[rows] = picked
    # noise: identical uploads are refused, and near-identical ones are copies
    return sent + view.rng().normal(0.0, sigma, size=sent.shape)


@dataclass(frozen=True)
class _Kind:
    forge: AdaptiveAttack
    doc: str


#: Adaptive kinds: name -> (forge, description).
ADAPTIVE_REGISTRY: dict[str, _Kind] = {
    "slice_aware": _Kind(_slice_aware, "right at the bound on the slice, negated elsewhere"),
    "threshold_inflate": _Kind(_threshold_inflate, "far, distinct colluders inflate the copy cut"),
    "threshold_inside": _Kind(_threshold_inside, "one far colluder, the others inside the subset"),
    "jitter": _Kind(_jitter, "negated mean plus noise just above the copy threshold"),
    "above_chance": _Kind(_above_chance, "jitter, the honest mean on 60% of rows: evidence > 0"),
    "stealthy": _Kind(_stealthy, "the honest mean, top two classes swapped on chosen rows"),
}


def forge(kind: str, view: RoundView) -> np.ndarray:
    """Return the upload of ``kind`` for ``view``: float32, clipped to ``view.bound``.

    Raises
    ------
    UnknownAttack
        If ``kind`` is not registered (the message lists the kinds).
    AttackSpecInvalid
        If the view has no honest upload, or the forged upload is malformed.
    """
    entry = ADAPTIVE_REGISTRY.get(kind) if isinstance(kind, str) else None
    if entry is None:
        known = sorted(ADAPTIVE_REGISTRY)
        raise UnknownAttack(f"unknown adaptive attack {kind!r}; registered: {known}")
    if not view.honest:
        raise AttackSpecInvalid("an adaptive attack needs the round's honest uploads")
    own = np.asarray(view.own, dtype=np.float64)
    sent = np.asarray(entry.forge(view), dtype=np.float64)
    if sent.shape != own.shape or np.isnan(sent).any():
        raise AttackSpecInvalid(f"adaptive attack {kind!r} forged a malformed upload")
    return np.clip(sent, -view.bound, view.bound).astype(np.float32)
