"""A round's release plan, the fixed part: what one round may open (validated).

:class:`ReleasePlan` is built by the aggregator from its config and fixed at each
gatekeeper before the round's uploads are opened; its state machine is
:class:`~secure_fed.secure.plan_tracker.PlanTracker` and a gatekeeper's plans,
one per round, are :class:`~secure_fed.secure.plan_book.PlanBook`. Everything is
importable from :mod:`secure_fed.secure.release_plan`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from secure_fed.errors import ModeSetupInvalid, ScoringInvalid
from secure_fed.secure.consortium_checks import CODEC_WEIGHT_FLOOR
from secure_fed.secure.consortium_policy import (
    MIN_EVIDENCE_ROWS,
    MIN_MOMENT_ROWS,
)
from secure_fed.secure.protocol.vocabulary import Step
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.mahalanobis import (
    ScoringConfig,
)
from secure_fed.secure.scoring.outlier import OutlierConfig

__all__ = [
    "CAP_TOLERANCE",
    "MIN_EVIDENCE_ROWS",
    "MIN_MOMENT_ROWS",
    "STEPS",
    "WEIGHT_FLOOR",
    "WHITENING_RTOL",
    "ReleasePlan",
    "exclusion_floor",
    "flag_budget",
]


#: Steps of a round, in order (``done`` after the publication).
STEPS = tuple(Step)
#: Smallest publication weight: the shares codec's weight resolution (2^-16).
WEIGHT_FLOOR = CODEC_WEIGHT_FLOOR
# A plan's moment and ranking rows are at least ``min(N, MIN_MOMENT_ROWS)``: one scalar
# per participant must average over many samples, never expose one sample's square. An
# evidence scalar averages over at least ``min(N, MIN_EVIDENCE_ROWS)`` labeled rows: a
# public linear function of one upload must not single out a few rows. (Both are the
# gatekeepers' own minimums; a consortium policy may require more.)
#: Relative rounding slack of the weight cap check (a renormalised capped weight may sit
#: a few ulps above the cap; an excess this small moves no fixed-point weight).
CAP_TOLERANCE = 1e-12
#: Relative tolerance when a claimed whitening is compared with the derived one.
WHITENING_RTOL = 1e-9


def exclusion_floor(outlier_filter: object, num_classes: int) -> float:
    """Smallest final score of a participant the filter may exclude.

    An :class:`~secure_fed.secure.scoring.outlier.OutlierPolicy` excludes only
    above its exclusion threshold (attribute ``high``); other filters get the
    default configuration's threshold.
    """
    high = getattr(outlier_filter, "high", None)
    if isinstance(high, float) and math.isfinite(high):
        return high
    return OutlierConfig().thresholds(num_classes - 1)[1]


def flag_budget(outlier_filter: object) -> int | None:
    """Return the most participants the filter flags in a round (``max_flagged``).

    An :class:`~secure_fed.secure.scoring.outlier.OutlierPolicy` says its own;
    other filters get the default configuration's (``None``: no budget).
    """
    config = getattr(outlier_filter, "config", None)
    budget = getattr(config, "max_flagged", None)
    if isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0:
        return budget
    return OutlierConfig().max_flagged


@dataclass(frozen=True, kw_only=True)
class ReleasePlan:
    """What one round may open (validated; the parameter is named in errors).

    Parameters
    ----------
    round_id
        The round.
    min_participants
        Smallest accepted set of the publication (the gatekeeper applies its own
        minimum too).
    num_samples, num_classes
        ``(N, C)`` of every upload.
    moment_samples
        ``S``: rows of the ranking scores and of the second moment.
    subset_fraction, min_subset
        ``h = min(K, max(min_subset, ceil(subset_fraction (K + 1))))``.
    ridge
        Relative ridge of the whitening.
    scored
        False: the round opens only its publication (no scoring passes).
    ranking
        False: no ranking pass; the subset is the whole roster.
    weight_floor, max_weight
        Bounds of every publication weight (``max_weight`` defaults to
        ``1 / min_participants``: no publication puts more than an equal share of
        the quorum on one participant).
    exclude_above
        An excluded participant's final score must exceed this.
    max_flagged
        The most participants the publication may leave out on their scores (an
        impossible, negative score aside): the outlier policy's budget of factors
        below 1, of which the gatekeepers see the exclusions (``None``: no budget
        beyond the minority rule every plan has).
    evidence
        The labeled slice (public-set rows and their labels): after the final
        scores, one evidence scalar per roster member, with exactly this
        slice's mask (``None``: no step).
    copies
        After the evidence (or the final scores), one pair distance per pair of
        the copy set, kept by the gatekeeper, which releases only the
        near-duplicate count of each member (False: no step).
    """

    round_id: int
    min_participants: int
    num_samples: int
    num_classes: int
    moment_samples: int
    subset_fraction: float = 0.5
    min_subset: int = 2
    ridge: float = 1e-6
    scored: bool = True
    ranking: bool = True
    weight_floor: float = WEIGHT_FLOOR
    max_weight: float | None = None
    exclude_above: float = 27.877
    max_flagged: int | None = None
    evidence: EvidenceSlice | None = None
    copies: bool = False

    def __post_init__(self) -> None:
        ints = ("round_id", "min_participants", "num_samples", "num_classes", "moment_samples")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ModeSetupInvalid(f"{name} must be a non-negative integer, got {value!r}")
        cap = self.max_weight
        if cap is None and self.min_participants >= 1:
            object.__setattr__(self, "max_weight", 1.0 / self.min_participants)
        elif isinstance(cap, int) and not isinstance(cap, bool):
            object.__setattr__(self, "max_weight", float(cap))
        checks = [
            ("min_participants", self.min_participants >= 2),
            ("num_classes", self.num_classes >= 2),
            ("moment_samples", 1 <= self.moment_samples <= self.num_samples),
            ("subset_fraction", 0 < self.subset_fraction <= 1),
            ("min_subset", isinstance(self.min_subset, int) and self.min_subset >= 2),
            ("ridge", 0 <= self.ridge < 1),
            ("weight_floor", 0 < self.weight_floor <= 1),
            (
                "max_weight",
                isinstance(self.max_weight, float) and self.weight_floor <= self.max_weight <= 1,
            ),
            ("exclude_above", math.isfinite(self.exclude_above)),
            (
                "max_flagged",
                self.max_flagged is None
                or (
                    isinstance(self.max_flagged, int)
                    and not isinstance(self.max_flagged, bool)
                    and self.max_flagged >= 0
                ),
            ),
            ("copies", isinstance(self.copies, bool) and (self.scored or not self.copies)),
        ]
        for name, ok in checks:
            if not ok:
                raise ModeSetupInvalid(f"{name} is out of range: {getattr(self, name)!r}")
        self._check_evidence()

    def _check_evidence(self) -> None:
        """Refuse a slice that is not distinct integer rows of the public set with valid labels."""
        piece = self.evidence
        if piece is None:
            return
        if not isinstance(piece, EvidenceSlice) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (*piece.rows, *piece.labels)
        ):
            raise ModeSetupInvalid(f"evidence must be an EvidenceSlice of integers, got {piece!r}")
        try:
            piece.mask((self.num_samples, self.num_classes))
        except ScoringInvalid as exc:
            raise ModeSetupInvalid(f"evidence is out of range: {exc}") from exc

    @property
    def cap(self) -> float:
        """The publication weight cap: ``max_weight`` with its default applied."""
        if self.max_weight is None:  # pragma: no cover - __post_init__ always sets it
            raise ModeSetupInvalid("max_weight is not set")
        return self.max_weight

    @property
    def evidence_rows(self) -> int:
        """Rows of the labeled slice (0: the plan has no evidence step)."""
        return 0 if self.evidence is None else len(self.evidence.rows)

    @classmethod
    def for_round(
        cls,
        *,
        round_id: int,
        min_participants: int,
        shape: tuple[int, int],
        scoring: ScoringConfig,
        scored: bool = True,
        max_weight: float | None = None,
        exclude_above: float | None = None,
        evidence: EvidenceSlice | None = None,
        copies: bool = False,
        max_flagged: int | None = None,
    ) -> ReleasePlan:
        """Build a round's plan from its config and the aggregator's scoring parameters.

        ``max_weight`` ``None``: ``1 / min_participants``; ``max_flagged`` ``None``:
        the default outlier policy's budget (:func:`flag_budget`).
        """
        floor = exclusion_floor(None, shape[1]) if exclude_above is None else exclude_above
        return cls(
            round_id=round_id,
            min_participants=max(2, min_participants),
            num_samples=shape[0],
            num_classes=shape[1],
            moment_samples=min(scoring.moment_samples, shape[0]),
            subset_fraction=scoring.subset_fraction,
            min_subset=max(2, scoring.min_subset),
            ridge=scoring.ridge,
            scored=scored,
            ranking=scoring.c_steps >= 1,
            max_weight=max_weight,
            exclude_above=floor,
            max_flagged=flag_budget(None) if max_flagged is None else max_flagged,
            evidence=evidence if scored else None,
            copies=copies and scored,
        )

    def subset_size(self, count: int) -> int:
        """``h`` for a roster of ``count`` (at least ``min_participants``: H's covariance opens)."""
        low = max(self.min_subset, self.min_participants)
        return min(count, max(low, math.ceil(self.subset_fraction * (count + 1))))

    def to_bytes(self) -> bytes:
        """Canonical JSON (floats as exact ``repr`` strings) for the gatekeepers."""
        data = {k: repr(v) if isinstance(v, float) else v for k, v in asdict(self).items()}
        if self.max_flagged is None:  # a plan without a budget: the same bytes as before
            del data["max_flagged"]
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ReleasePlan:
        """Parse :meth:`to_bytes` output.

        Raises
        ------
        ModeSetupInvalid
            On anything but a valid plan.
        """
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict):
                raise TypeError(f"a plan is a JSON object, not {type(raw).__name__}")
            floats = {"subset_fraction", "ridge", "weight_floor", "max_weight", "exclude_above"}
            fields: dict[str, Any] = {k: float(v) if k in floats else v for k, v in raw.items()}
            piece = fields.get("evidence")
            if piece is not None:
                fields["evidence"] = EvidenceSlice(
                    rows=tuple(piece["rows"]), labels=tuple(piece["labels"])
                )
            return cls(**fields)
        except (ValueError, TypeError, KeyError, ScoringInvalid) as exc:
            raise ModeSetupInvalid(f"release plan refused: {exc}") from exc
