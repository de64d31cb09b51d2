"""Outlier decisions from one pooled Mahalanobis score per participant.

Policy (defaults in :class:`OutlierConfig`, documented in docs/secure-aggregation.md):

* thresholds are chi-square quantiles on ``C - 1`` degrees of freedom, the
  distribution of one sample's quadratic form under the pooled Gaussian model
  (``mahalanobis.py``). A participant's score is the *mean* over samples, whose
  honest spread is driven by model heterogeneity, not by sampling, so the
  per-sample quantile is used as a deliberately loose cut: an average sample
  as far out as the 0.999 extreme of a single one;
* history: exclusion needs both the exponential moving average of a
  participant's scores across rounds *and* this round's score above the
  threshold, so one noisy round does not exclude an honest participant and one
  good round readmits it; a raw score above ``hard_factor`` times the
  exclusion threshold excludes at once (gross attacks need no history);
* at most a minority is excluded in a round, never leaving fewer than
  ``min_keep``; the highest scores go first, the rest are down-weighted;
* with a budget ``max_flagged`` (none by default), at most that many participants
  get a factor below 1 in a round (the lowest factors, then the highest scores, go first; the rest
  are kept). This
  is what bounds one participant's influence on the publication
  (:func:`influence_bound`): whatever one upload does to the robust subset's
  covariance, it can change the factors of at most ``max_flagged`` others in
  each direction. A score no honest upload can have (:func:`impossible_score`)
  is excluded outside the budget: an upload within the public bound never gets
  one, whoever else uploads;
* between the down-weight and the exclusion thresholds the weight factor falls
  linearly from 1 to ``min_factor``, and stays at ``min_factor`` above: with
  heterogeneous honest models the evidence of one distance is weak, so a
  lower weight is preferred to removal. The round engine multiplies the factor
  into the published weight (:meth:`secure_fed.federation.weighting.DynamicWeighting.weigh`)
  and writes one ``outlier.decision`` audit event per participant with the
  decision, the factor and the weight it applied.

The scores themselves come from the robust (C-step) estimate of
:func:`secure_fed.secure.scoring.mahalanobis.pooled_mahalanobis`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace

from scipy.stats import chi2

from secure_fed.errors import OutlierConfigInvalid, StaleRound
from secure_fed.secure.audit import AuditSink, MemoryAuditSink

__all__ = [
    "ACTIONS",
    "IMPOSSIBLE_SCORE_SLACK",
    "AuditSink",
    "Decision",
    "MemoryAuditSink",
    "OutlierConfig",
    "OutlierPolicy",
    "excluded_ids",
    "flagged_count",
    "impossible_score",
    "influence_bound",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class OutlierConfig:
    """Validated parameters of :class:`OutlierPolicy`.

    Parameters
    ----------
    exclude_quantile
        Chi-square quantile of the exclusion threshold, in ``(0.5, 1)``; default 0.999.
    downweight_quantile
        Quantile where down-weighting starts, in ``(0.5, exclude_quantile]``; default 0.99.
    ema
        Weight of history in the score EMA, in ``[0, 1)``; 0 uses this round only.
    hard_factor
        A raw score above ``hard_factor * exclusion threshold`` excludes regardless of
        history; ``>= 1``.
    min_factor
        Weight factor reached at the exclusion threshold, in ``(0, 1]``. Zero is
        refused: a zero weight is an exclusion, and exclusions are capped to a
        minority (a participant in the sum with weight 0 would also still count
        towards the round's ``min_participants`` without contributing).
    dispersion
        When True (default), the chi-square cuts are multiplied by the round's
        robust overdispersion (:meth:`OutlierPolicy.dispersion`), so honest
        heterogeneity is not mistaken for poisoning; False uses the model's cuts
        as they are.
    exclude
        When False, never exclude on the chi-square cuts: everything above the
        down-weight threshold is down-weighted (factor ``min_factor`` at and above the
        exclusion threshold).
        The federation's default: predictions of weak, structurally different
        honest models can be as far from the consensus as poisoned ones (see
        docs/secure-aggregation.md for the false positives measured on
        heterogeneous DP-trained models).
    max_flagged
        The most participants whose factor may be below 1 (excluded or down-weighted)
        in one round, an integer ``>= 0`` (0 disables the filter except for
        impossible scores); ``None`` (default): no budget (exclusions are
        still capped to a minority, down-weights are not). A budget below the
        number of attackers lets the rest of them through at full weight: the
        consortium trades that against the influence bound. The lowest factors (then the highest
        scores) keep theirs, the others are kept at factor 1. With it one in-range
        participant moves a published cell by at most :func:`influence_bound`; the
        consortium policy fixes the largest value a round may use.

    A score below ``-IMPOSSIBLE_SCORE_SLACK`` (a squared distance cannot be negative;
    in ckks mode a value beyond the ciphertext's headroom wraps its score) is excluded
    whatever the configuration, and ignored by the round's dispersion.
    """

    exclude_quantile: float = 0.999
    downweight_quantile: float = 0.99
    ema: float = 0.5
    hard_factor: float = 3.0
    min_factor: float = 0.05
    dispersion: bool = True
    exclude: bool = True
    max_flagged: int | None = None

    def __post_init__(self) -> None:
        checks = [
            ("exclude_quantile", 0.5 < self.exclude_quantile < 1),
            ("downweight_quantile", 0.5 < self.downweight_quantile <= self.exclude_quantile),
            ("ema", 0 <= self.ema < 1),
            ("hard_factor", math.isfinite(self.hard_factor) and self.hard_factor >= 1),
            ("min_factor", 0 < self.min_factor <= 1),
            ("dispersion", isinstance(self.dispersion, bool)),
            ("exclude", isinstance(self.exclude, bool)),
            (
                "max_flagged",
                self.max_flagged is None
                or (
                    isinstance(self.max_flagged, int)
                    and not isinstance(self.max_flagged, bool)
                    and self.max_flagged >= 0
                ),
            ),
        ]
        for name, ok in checks:
            if not ok:
                raise OutlierConfigInvalid(f"{name} is out of range: {getattr(self, name)!r}")

    def thresholds(self, dof: int) -> tuple[float, float]:
        """``(downweight, exclude)`` thresholds for ``dof`` degrees of freedom."""
        if not isinstance(dof, int) or dof < 1:
            raise OutlierConfigInvalid(f"dof must be an integer >= 1, got {dof!r}")
        return (
            float(chi2.ppf(self.downweight_quantile, dof)),
            float(chi2.ppf(self.exclude_quantile, dof)),
        )


ACTIONS = ("keep", "downweight", "exclude")

#: How far below 0 a decrypted squared distance may fall through flooding and encoding
#: noise alone (CKKS floods a score near 0 by about 1.2e-4; 7 sigma is 8.5e-4).
IMPOSSIBLE_SCORE_SLACK = 1e-2


def impossible_score(score: float) -> bool:
    """Return True for a finite score no honest upload can have (below ``-slack``)."""
    return math.isfinite(score) and score < -IMPOSSIBLE_SCORE_SLACK


@dataclass(frozen=True, kw_only=True)
class Decision:
    """One participant's decision in one round.

    ``factor`` multiplies the participant's weight: 1 for ``keep``, in
    ``(0, 1]`` for ``downweight`` and exactly 0 for ``exclude``. The
    thresholds are None when the filter has none (:class:`KeepAll`-style filters).

    Raises
    ------
    OutlierConfigInvalid
        If the action is unknown or the factor does not match it.
    """

    participant_id: str
    score: float
    smoothed: float
    action: str
    factor: float
    downweight_threshold: float | None = None
    exclude_threshold: float | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise OutlierConfigInvalid(f"action must be one of {ACTIONS}, got {self.action!r}")
        if not (math.isfinite(self.factor) and 0 <= self.factor <= 1):
            raise OutlierConfigInvalid(f"factor must be in [0, 1], got {self.factor!r}")
        if (self.action == "exclude") != (self.factor == 0):
            raise OutlierConfigInvalid(
                f"factor of {self.participant_id!r} is {self.factor!r}, which does not match "
                f"action {self.action!r} (0 exactly when excluded)"
            )

    @property
    def excluded(self) -> bool:
        """True when the participant is left out of the aggregate."""
        return self.action == "exclude"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready fields (persisted with the round state)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Decision:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)  # type: ignore[arg-type]


def excluded_ids(decisions: Mapping[str, Decision]) -> set[str]:
    """Ids of the excluded participants among ``decisions``."""
    return {pid for pid, d in decisions.items() if d.excluded}


class OutlierPolicy:
    """Stateful decision policy: EMA score history per participant.

    Implements the round engine's ``OutlierFilter`` seam. It writes no audit
    events itself: the engine records each decision together with the weight
    it applied, once that weight exists.

    Parameters
    ----------
    dof
        Degrees of freedom ``C - 1``.
    config
        Thresholds and smoothing.
    min_keep
        Never exclude so many that fewer remain (the round's ``min_participants``).
    """

    def __init__(self, *, dof: int, config: OutlierConfig | None = None, min_keep: int = 1) -> None:
        if not isinstance(min_keep, int) or min_keep < 1:
            raise OutlierConfigInvalid(f"min_keep must be an integer >= 1, got {min_keep!r}")
        self.min_keep = min_keep
        self.config = config or OutlierConfig()
        self.dof = dof
        self.low, self.high = self.config.thresholds(dof)
        self.history: dict[str, float] = {}
        self._before: dict[str, float] = {}
        self._round: int | None = None

    def decide(self, scores: Mapping[str, float], *, round_id: int) -> dict[str, Decision]:
        """Decide for every scored participant of round ``round_id``; update the EMA history.

        Deciding the same round again (e.g. after the aggregator restarted in
        the filtering stage) starts from the history before that round, so a
        round enters the EMA once.

        A score no honest upload can have (:func:`impossible_score`: a negative squared
        distance) is excluded, kept out of the history and of the dispersion, and logged.

        Raises
        ------
        OutlierConfigInvalid
            If a score is not a finite number.
        StaleRound
            If ``round_id`` is older than the last round decided.
        """
        for pid, s in scores.items():
            if not (isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)):
                raise OutlierConfigInvalid(f"score of {pid!r} must be a finite number, got {s!r}")
        if self._round is not None and round_id < self._round:
            raise StaleRound(f"round {round_id} is older than the last decided round {self._round}")
        if round_id != self._round:
            self._before, self._round = dict(self.history), round_id
        self.history = dict(self._before)
        valid = {p: s for p, s in scores.items() if not impossible_score(s)}
        scale = self.dispersion(valid)
        out = {
            pid: self._decide(pid, float(scores[pid]), scale)
            if pid in valid
            else self._impossible(pid, float(scores[pid]), round_id)
            for pid in sorted(scores)
        }
        self._cap(out)
        for d in out.values():
            _log.info(
                "round %d: %s %s (score %.3g, smoothed %.3g, factor %.3g)",
                round_id,
                d.participant_id,
                d.action,
                d.score,
                d.smoothed,
                d.factor,
            )
        return out

    def _impossible(self, pid: str, score: float, round_id: int) -> Decision:
        _log.warning(
            "round %d: %s scored %r, which no honest upload can (out of range): excluded",
            round_id,
            pid,
            score,
        )
        low, high = self.low, self.high
        return Decision(
            participant_id=pid,
            score=score,
            smoothed=score,
            action="exclude",
            factor=0.0,
            downweight_threshold=low,
            exclude_threshold=high,
        )

    def _cap(self, out: dict[str, Decision]) -> None:
        """Exclude at most a minority, and never below ``min_keep`` (highest scores go first).

        A filter that removes a majority is no longer robust statistics but a
        takeover by whoever controls the majority; the others are down-weighted
        to ``min_factor`` instead. Then at most ``max_flagged`` factors stay
        below 1 (:meth:`_budget`).
        """
        excluded = sorted(  # an impossible score goes first: no honest upload has one
            (d for d in out.values() if d.excluded),
            key=lambda d: (not impossible_score(d.score), -d.score, d.participant_id),
        )
        limit = max(0, min((len(out) - 1) // 2, len(out) - self.min_keep))
        for d in excluded[limit:]:
            out[d.participant_id] = replace(d, action="downweight", factor=self.config.min_factor)
        self._budget(out)

    def _budget(self, out: dict[str, Decision]) -> None:
        """Keep at most ``max_flagged`` factors below 1; the others go back to 1 (``keep``).

        ``max_flagged`` ``None``: no budget.

        The lowest factors go first (an exclusion before a down-weight), then the
        highest scores, then the id. An impossible score stays excluded outside
        the budget. The score history is not touched: a participant kept here
        is still judged on its smoothed score next round.
        """
        flagged = sorted(
            (d for d in out.values() if d.factor < 1 and not impossible_score(d.score)),
            key=lambda d: (d.factor, -d.score, d.participant_id),
        )
        budget = self.config.max_flagged
        if budget is None:
            return
        for d in flagged[budget:]:
            out[d.participant_id] = replace(d, action="keep", factor=1.0)

    def dispersion(self, scores: Mapping[str, float]) -> float:
        """Robust overdispersion of this round's scores: ``max(1, lower_median(s) / dof)``.

        Under the pooled Gaussian model an honest score has expectation
        ``C - 1``; heterogeneous honest models (different architectures, label
        skew) spread further, and the chi-square cuts would then down-weight
        honest participants as if they were poisoned. The cuts are multiplied by
        this factor, the quasi-likelihood dispersion correction with the lower
        median in place of a mean: while attackers are a minority the lower
        median is at or below an honest score, so they cannot raise it. It only
        ever raises the thresholds (never below the model's own).
        """
        if not scores or not self.config.dispersion:
            return 1.0
        ordered = sorted(float(s) for s in scores.values())
        low_median = ordered[(len(ordered) - 1) // 2]  # at or below an honest score
        return max(1.0, low_median / self.dof)

    def _decide(self, pid: str, score: float, scale: float = 1.0) -> Decision:
        cfg = self.config
        low, high = self.low * scale, self.high * scale
        old = self.history.get(pid)
        smoothed = score if old is None else cfg.ema * old + (1 - cfg.ema) * score
        self.history[pid] = smoothed
        if score > cfg.hard_factor * high or (smoothed > high and score > high):
            action, factor = ("exclude", 0.0) if cfg.exclude else ("downweight", cfg.min_factor)
        elif smoothed > low:
            # a high history alone (this round's score below the exclusion threshold) keeps
            # the factor at min_factor, never below
            frac = min(1.0, (smoothed - low) / max(high - low, 1e-12))
            action, factor = "downweight", cfg.min_factor + (1.0 - frac) * (1.0 - cfg.min_factor)
        else:
            action, factor = "keep", 1.0
        return Decision(
            participant_id=pid,
            score=score,
            smoothed=smoothed,
            action=action,
            factor=factor,
            downweight_threshold=low,
            exclude_threshold=high,
        )


def flagged_count(decisions: Mapping[str, Decision]) -> int:
    """Participants with a factor below 1 that count against ``max_flagged``.

    An exclusion on an impossible score (:func:`impossible_score`) does not count.
    """
    return sum(1 for d in decisions.values() if d.factor < 1 and not impossible_score(d.score))


def influence_bound(*, bound: float, max_weight: float, marked: int) -> float:
    """Return the most one participant within ``[-bound, bound]`` moves a published cell.

    ``2 * bound * min(1, max_weight * (1 + marked))``, where ``marked`` is the
    most participants other than it whose weight term (outlier factor x merit x
    copy factor) is below 1 in either round, the round with it and the same
    round without it. The derivation and its assumptions are in
    docs/audit/threat-model.md ("What one malicious participant can and cannot
    do"); with neither evidence weighting nor copy detection, ``marked`` is the
    outlier policy's budget ``max_flagged`` (without a budget, up to every other
    participant: the bound is then ``2 * bound``).

    Raises
    ------
    OutlierConfigInvalid
        If ``bound`` is not positive and finite, ``max_weight`` is outside
        ``(0, 1]`` or ``marked`` is not an integer ``>= 0``.
    """
    if not (math.isfinite(bound) and bound > 0):
        raise OutlierConfigInvalid(f"bound must be positive and finite, got {bound!r}")
    if not (math.isfinite(max_weight) and 0 < max_weight <= 1):
        raise OutlierConfigInvalid(f"max_weight must be in (0, 1], got {max_weight!r}")
    if isinstance(marked, bool) or not isinstance(marked, int) or marked < 0:
        raise OutlierConfigInvalid(f"marked must be an integer >= 0, got {marked!r}")
    return 2.0 * bound * min(1.0, max_weight * (1 + marked))
