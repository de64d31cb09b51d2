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
* between the down-weight and the exclusion thresholds the weight factor falls
  linearly from 1 to ``min_factor`` (NOTES.md section 6: prefer down-weighting
  when the evidence is weak); the factor multiplies the quality fed to
  :class:`secure_fed.federation.weighting.DynamicWeighting`;
* every decision is an audit event ``outlier.decision`` with score, EMA and both
  thresholds, written through the small :class:`AuditSink` protocol.

The scores themselves come from the robust (C-step) estimate of
:func:`secure_fed.secure.scoring.mahalanobis.pooled_mahalanobis`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from scipy.stats import chi2

from secure_fed.errors import OutlierConfigInvalid
from secure_fed.secure.audit import AuditSink, MemoryAuditSink

__all__ = [
    "AuditSink",
    "Decision",
    "MemoryAuditSink",
    "OutlierConfig",
    "OutlierPolicy",
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
        Weight factor reached at the exclusion threshold, in ``[0, 1]``.
    exclude
        When False, never exclude: everything above the down-weight threshold is
        down-weighted (factor ``min_factor`` at and above the exclusion threshold).
        The federation's default (NOTES.md section 6; see docs/secure-aggregation.md
        for the false positives measured on heterogeneous DP-trained models).
    """

    exclude_quantile: float = 0.999
    downweight_quantile: float = 0.99
    ema: float = 0.5
    hard_factor: float = 3.0
    min_factor: float = 0.05
    exclude: bool = True

    def __post_init__(self) -> None:
        checks = [
            ("exclude_quantile", 0.5 < self.exclude_quantile < 1),
            ("downweight_quantile", 0.5 < self.downweight_quantile <= self.exclude_quantile),
            ("ema", 0 <= self.ema < 1),
            ("hard_factor", math.isfinite(self.hard_factor) and self.hard_factor >= 1),
            ("min_factor", 0 <= self.min_factor <= 1),
            ("exclude", isinstance(self.exclude, bool)),
        ]
        for name, ok in checks:
            if not ok:
                raise OutlierConfigInvalid(f"{name} is out of range: {getattr(self, name)!r}")

    def thresholds(self, dof: int) -> tuple[float, float]:
        """``(downweight, exclude)`` thresholds for ``dof`` degrees of freedom."""
        if not isinstance(dof, int) or dof < 1:
            raise OutlierConfigInvalid(f"dof must be an integer >= 1, got {dof!r}")
        return (float(chi2.ppf(self.downweight_quantile, dof)),
                float(chi2.ppf(self.exclude_quantile, dof)))  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """One participant's decision in one round."""

    participant_id: str
    score: float
    smoothed: float
    action: str  # "keep", "downweight" or "exclude"
    factor: float
    downweight_threshold: float
    exclude_threshold: float


class OutlierPolicy:
    """Stateful decision policy: EMA history per participant, audit on every decision.

    Parameters
    ----------
    dof
        Degrees of freedom ``C - 1``.
    config
        Thresholds and smoothing.
    audit
        Sink for ``outlier.decision`` events (optional).
    min_keep
        Never exclude so many that fewer remain (the round's ``min_participants``).
    """

    def __init__(self, *, dof: int, config: OutlierConfig | None = None,
                 audit: AuditSink | None = None, min_keep: int = 1) -> None:  # fmt: skip
        if not isinstance(min_keep, int) or min_keep < 1:
            raise OutlierConfigInvalid(f"min_keep must be an integer >= 1, got {min_keep!r}")
        self.min_keep = min_keep
        self.config = config or OutlierConfig()
        self.low, self.high = self.config.thresholds(dof)
        self.audit = audit
        self.history: dict[str, float] = {}
        self.last: dict[str, Decision] = {}
        self.round_id: int | None = None

    def decide_all(self, scores: Mapping[str, float], *, round_id: int | None = None) -> dict[str, Decision]:  # noqa: E501
        """Decide for every participant, update the EMA history, audit each decision.

        Raises
        ------
        OutlierConfigInvalid
            If a score is negative or not finite.
        """
        for pid, s in scores.items():
            if not (isinstance(s, int | float) and math.isfinite(s) and s >= 0):
                raise OutlierConfigInvalid(f"score of {pid!r} must be finite and >= 0, got {s!r}")
        out = {pid: self._decide(pid, float(scores[pid])) for pid in sorted(scores)}
        self._cap(out)
        for pid in sorted(out):
            self._audit(out[pid], round_id)
        self.last = out
        return out

    def _cap(self, out: dict[str, Decision]) -> None:
        """Exclude at most a minority, and never below ``min_keep`` (highest scores go first).

        A filter that removes a majority is no longer robust statistics but a
        takeover (NOTES.md section 6); the others are down-weighted instead.
        """
        excluded = sorted((d for d in out.values() if d.action == "exclude"),
                          key=lambda d: (-d.score, d.participant_id))  # fmt: skip
        limit = max(0, min((len(out) - 1) // 2, len(out) - self.min_keep))
        for d in excluded[limit:]:
            out[d.participant_id] = replace(d, action="downweight", factor=self.config.min_factor)

    def _decide(self, pid: str, score: float) -> Decision:
        cfg = self.config
        old = self.history.get(pid)
        smoothed = score if old is None else cfg.ema * old + (1 - cfg.ema) * score
        self.history[pid] = smoothed
        if score > cfg.hard_factor * self.high or (smoothed > self.high and score > self.high):
            action, factor = ("exclude", 0.0) if cfg.exclude else ("downweight", cfg.min_factor)
        elif smoothed > self.low:
            frac = (smoothed - self.low) / max(self.high - self.low, 1e-12)
            action, factor = "downweight", 1.0 - frac * (1.0 - cfg.min_factor)
        else:
            action, factor = "keep", 1.0
        return Decision(pid, score, smoothed, action, factor, self.low, self.high)

    def _audit(self, d: Decision, round_id: int | None) -> None:
        _log.info("outlier decision %s: %s (score %.3g, smoothed %.3g)", d.participant_id,
                  d.action, d.score, d.smoothed)  # fmt: skip
        if self.audit is not None:
            self.audit.record("outlier.decision", {
                "round_id": round_id, "participant_id": d.participant_id, "score": d.score,
                "smoothed": d.smoothed, "action": d.action, "factor": d.factor,
                "downweight_threshold": d.downweight_threshold,
                "exclude_threshold": d.exclude_threshold,
            })  # fmt: skip

    def decide(self, scores: Mapping[str, float]) -> set[str]:
        """Round-engine seam (``OutlierFilter``): decide and return the excluded ids."""
        return {p for p, d in self.decide_all(scores, round_id=self.round_id).items()
                if d.action == "exclude"}  # fmt: skip

    def factors(self) -> dict[str, float]:
        """Weight factors of the last decisions (1 keep, 0 exclude, in between down-weight)."""
        return {p: d.factor for p, d in self.last.items()}
