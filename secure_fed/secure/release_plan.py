"""A round's release plan: which values are opened, over whom, with which weights.

The plan is fixed when the round opens, before any upload is accepted, and
both gatekeepers (the key authority in ckks mode, the helper in shares mode)
hold it next to the aggregator. It allows, per round and in this order:

1. ``ranking`` (when the plan ranks): one scalar score per participant of the
   round's roster, ``mean_{i<S} ||p_ki - p̄_i||^2`` with ``p̄`` the mean over the
   roster, never opened (``W = I``);
2. ``moments``: ONE second-order release, the centred pooled second moment of
   the robust subset ``H`` (the ``h`` lowest ranking scores; ``h`` from the
   plan's rule), centred on ``H``'s never-opened mean;
3. ``final``: one scalar per participant, whitened with the ``W`` derived from
   that covariance and centred on ``H``'s mean;
4. ``evidence`` (when the plan names a labeled slice of the public set,
   ``evidence``): one scalar per participant of the roster, ``sum(M * p_k)``
   with ``M`` the mask of exactly that slice
   (:mod:`secure_fed.secure.scoring.evidence`): a public linear function of one
   upload, the same kind of release as a score. The plan carries the slice's
   rows and labels, so a gatekeeper refuses a request naming any other mask
   (one row would reveal one prediction);
5. ``copies`` (when the plan detects copies, ``copies``): near-duplicate
   detection over the copy set ``A`` (inside the scored roster, at most a
   minority left out, each left-out member scored above the exclusion floor:
   the publication's rule). One pair distance ``d_jk = mean_i ||p_j,i -
   p_k,i||^2`` per pair of ``A``, each pair once (purpose ``distance``); the
   gatekeeper keeps every distance to itself and, once the last pair is
   decrypted, releases only ``copies_k``, the number of others within
   ``theta`` times the typical distance
   (:func:`~secure_fed.secure.scoring.evidence.near_duplicates`), one integer
   per member of ``A``. The publication's accepted set must then be ``A``;
6. ``publication``: exactly ONE first-order release, the weighted sum over
   the accepted set ``A``: ``A`` inside the roster, ``|A| >= min_participants``,
   at most a minority excluded, and every excluded participant's final score
   above the plan's exclusion floor or negative (no honest squared distance is:
   :func:`~secure_fed.secure.scoring.outlier.impossible_score`); every weight at least the codec's
   resolution (a weight that rounds to zero is refused, not treated as an
   exclusion) and at most ``max_weight``.

No mean is ever opened: the only linear function of the uploads a round reveals
is its publication. :class:`PlanTracker` is a deterministic state machine the
aggregator and each gatekeeper run on the values opened so far, so a
gatekeeper derives the next allowed opening (the subset, the whitening, the
row counts) itself instead of trusting the request. :class:`PlanBook` plugs
the trackers into :class:`~secure_fed.secure.release_policy.ReleasePolicy` as
an observing release rule; its refusals become ``access.denied`` events.
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from secure_fed.errors import ModeSetupInvalid, ReleaseRefused, ScoringInvalid
from secure_fed.secure.consortium_policy import (
    CODEC_WEIGHT_FLOOR,
    MIN_EVIDENCE_ROWS,
    MIN_MOMENT_ROWS,
    PolicyPin,
)
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.roster_rule import isolation_reason
from secure_fed.secure.scoring.evidence import EvidenceSlice, near_duplicates
from secure_fed.secure.scoring.mahalanobis import (
    ScoringConfig,
    lowest_scores,
    pooled_covariance,
    whitening,
)
from secure_fed.secure.scoring.outlier import OutlierConfig, impossible_score

__all__ = [
    "MIN_EVIDENCE_ROWS",
    "MIN_MOMENT_ROWS",
    "STEPS",
    "WEIGHT_FLOOR",
    "PlanBook",
    "PlanTracker",
    "ReleasePlan",
    "exclusion_floor",
]

_log = logging.getLogger(__name__)

#: Steps of a round, in order (``done`` after the publication).
STEPS = ("ranking", "moments", "final", "evidence", "copies", "publication", "done")
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
    ) -> ReleasePlan:
        """Build a round's plan from its config and the aggregator's scoring parameters.

        ``max_weight`` ``None``: ``1 / min_participants``.
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


def _as_tuple(matrix: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(x) for x in row) for row in np.asarray(matrix))


@dataclass
class PlanTracker:
    """The plan's state machine on the values opened so far (aggregator and gatekeepers).

    Parameters
    ----------
    plan
        The round's plan.
    enrolled
        Participants the party knows to be enrolled (``None``: not known).
    """

    plan: ReleasePlan
    enrolled: frozenset[str] | None = None
    phase: str = field(init=False)
    roster: tuple[str, ...] | None = None
    subset: tuple[str, ...] | None = None
    whiten: np.ndarray | None = None
    pass_scores: dict[str, float] = field(default_factory=dict)
    ranking_scores: dict[str, float] = field(default_factory=dict)
    final_scores: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, float] = field(default_factory=dict)
    copy_set: tuple[str, ...] | None = None
    distances: dict[tuple[str, str], float | None] = field(default_factory=dict, repr=False)
    copies: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.plan.scored:
            self.phase = "publication"
        else:
            self.phase = "ranking" if self.plan.ranking else "moments"

    def step_of(self, request: ReleaseRequest) -> str | None:
        """Return the plan step ``request`` asks for (``None``: none, e.g. a mean)."""
        if request.purpose == "score":
            return request.step if request.step in ("ranking", "final", "evidence") else None
        steps = {"moments": "moments", "aggregate": "publication", "distance": "copies"}
        return steps.get(request.purpose)

    def rows(self, step: str) -> int:
        """Rows a score or moment of ``step`` averages over."""
        if step == "evidence":
            return self.plan.evidence_rows
        full = step in ("final", "copies")
        return self.plan.num_samples if full else self.plan.moment_samples

    def reason(self, request: ReleaseRequest) -> str | None:
        """Why the plan refuses ``request`` now, or ``None``."""
        if request.round_id != self.plan.round_id:
            return f"the plan is for round {self.plan.round_id}"
        if request.purpose == "mean":
            return "the release plan opens no means (they stay encrypted / shared)"
        step = self.step_of(request)
        if step is None:
            return f"purpose {request.purpose!r} (step {request.step!r}) is not in the plan"
        if step != self.phase:
            return f"the plan allows {self.phase!r} now, not {step!r}"
        if step == "publication":
            return self._publication_reason(request)
        if step == "evidence":
            return self._evidence_reason(request)
        if step == "copies":
            return self._copies_reason(request)
        return self._roster_reason(request, step) or self._score_reason(request, step)

    def _evidence_reason(self, request: ReleaseRequest) -> str | None:
        """One scalar of the plan's slice mask per roster member, no centre, no whitening."""
        if tuple(sorted(request.roster or ())) != self.roster:
            return "evidence: the roster must be the scored roster"
        if request.centre is not None or request.whitening is not None:
            return "evidence: a public linear function has no centre and no whitening"
        if request.evidence != self.plan.evidence:
            return "evidence: the mask is not the plan's labeled slice"
        if request.samples != self.plan.evidence_rows:
            return f"evidence: the plan fixes {self.plan.evidence_rows} rows, not {request.samples}"
        pid = request.contributors[0] if len(request.contributors) == 1 else None
        if pid is None or pid in self.pass_scores or pid not in (self.roster or ()):
            return "evidence: one unreleased member of the roster at a time"
        return None

    def _copies_reason(self, request: ReleaseRequest) -> str | None:
        """One unreleased pair of the copy set, over all rows, no centre, ``W = I``."""
        members = tuple(sorted(request.roster or ()))
        reason = self._copy_set_reason(members)
        if reason is not None:
            return f"copies: {reason}"
        pair = tuple(sorted(request.contributors))
        if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(members):
            return "copies: a distance is between two distinct members of the copy set"
        if pair in self.distances:
            return f"copies: the distance of {list(pair)} was already decrypted"
        if request.centre is not None or request.whitening is not None:
            return "copies: a pair distance has no centre and no whitening (W = I)"
        if request.samples != self.plan.num_samples:
            return f"copies: the plan fixes {self.plan.num_samples} rows, not {request.samples}"
        return None

    def _copy_set_reason(self, members: tuple[str, ...]) -> str | None:
        """Check the copy set: fixed by its first pair, in the roster, the publication's rule."""
        if self.copy_set is not None:
            return None if members == self.copy_set else "the copy set differs from the fixed one"
        if len(set(members)) != len(members) or len(members) < self.plan.min_participants:
            return f"the copy set needs {self.plan.min_participants} distinct participants"
        outside = sorted(set(members) - set(self.roster or ()))
        if outside:
            return f"participants {outside} are not in the round's roster"
        return self._exclusion_reason(set(self.roster or ()) - set(members))

    def _roster_reason(self, request: ReleaseRequest, step: str) -> str | None:
        roster = request.contributors if step == "moments" else request.roster
        if step == "moments" and self.subset is not None:
            if tuple(sorted(roster or ())) != self.subset:
                return f"moments must cover the plan's subset {list(self.subset)}"
            roster = self.roster
        if roster is None:
            return "a scoring pass must name its roster"
        if self.roster is not None:
            return (
                None if tuple(sorted(roster)) == self.roster else "roster differs from the plan's"
            )
        if len(set(roster)) != len(roster) or len(roster) < self.plan.min_participants:
            return f"a roster needs {self.plan.min_participants} distinct participants"
        unknown = sorted(set(roster) - self.enrolled) if self.enrolled is not None else []
        return f"participants {unknown} are not enrolled" if unknown else None

    def _score_reason(self, request: ReleaseRequest, step: str) -> str | None:
        wanted_centre = self.subset or ()
        if step == "ranking":
            wanted_centre = tuple(sorted(request.roster or ()))
        elif step == "moments" and self.subset is None:
            wanted_centre = tuple(sorted(request.contributors))
        if request.centre is None or tuple(sorted(request.centre)) != wanted_centre:
            return f"{step}: the centre must be the mean of {list(wanted_centre)}"
        if request.samples != self.rows(step):
            return f"{step}: the plan fixes {self.rows(step)} rows, not {request.samples}"
        if step == "moments":
            return None
        pid = request.contributors[0]
        if pid in self.pass_scores or pid not in (request.roster or ()):
            return f"{step}: {pid!r} is not an unscored member of the roster"
        return self._whitening_reason(request, step)

    def _whitening_reason(self, request: ReleaseRequest, step: str) -> str | None:
        claimed = None if request.whitening is None else np.asarray(request.whitening)
        c = self.plan.num_classes
        if step == "ranking":
            ok = claimed is None or (claimed.shape == (c, c) and np.allclose(claimed, np.eye(c)))
            return None if ok else "ranking scores use W = I"
        if claimed is None or self.whiten is None:
            return "a final score must name the whitening it uses"
        ok = claimed.shape == self.whiten.shape and np.allclose(
            claimed, self.whiten, rtol=WHITENING_RTOL, atol=0.0
        )
        return None if ok else "the whitening differs from the one the opened covariance gives"

    def _publication_reason(self, request: ReleaseRequest) -> str | None:
        accepted = set(request.contributors)
        if len(accepted) < self.plan.min_participants:
            return f"the publication needs {self.plan.min_participants} participants"
        if self.roster is not None:
            outside = sorted(accepted - set(self.roster))
            if outside:
                return f"participants {outside} are not in the round's roster"
            if self.copy_set is not None and accepted != set(self.copy_set):
                return f"the publication must cover the copy set {list(self.copy_set)}"
            reason = self._exclusion_reason(set(self.roster) - accepted)
            if reason:
                return reason
        elif self.enrolled is not None and not accepted <= self.enrolled:
            return f"participants {sorted(accepted - self.enrolled)} are not enrolled"
        return self._weights_reason(request.weights, len(request.contributors))

    def _exclusion_reason(self, excluded: set[str]) -> str | None:
        assert self.roster is not None
        if len(excluded) > (len(self.roster) - 1) // 2:
            return f"{len(excluded)} excluded of {len(self.roster)}: at most a minority"
        low = sorted(
            p
            for p in excluded
            if self.final_scores[p] <= self.plan.exclude_above
            and not impossible_score(self.final_scores[p])  # a negative squared distance
        )
        if low:
            return f"{low} scored below the exclusion floor and must be published"
        return None

    def _weights_reason(self, weights: Sequence[float] | None, count: int) -> str | None:
        if weights is None or len(weights) != count:
            return "the publication must state one public weight per participant"
        low = [w for w in weights if not w >= self.plan.weight_floor]
        if low:
            return (
                f"weights {low} are below the codec's resolution {self.plan.weight_floor!r} "
                "(a weight that rounds to zero is refused, not an exclusion)"
            )
        # Capped weights are renormalised in floating point after the cap: allow a few
        # ulps (1e-12 relative), far below the codec's resolution, never a real excess.
        high = [w for w in weights if w > self.plan.cap * (1.0 + CAP_TOLERANCE)]
        if high:
            return f"weights {high} exceed the public cap {self.plan.cap!r}"
        if abs(sum(weights) - 1.0) > count * self.plan.weight_floor:
            return f"weights sum to {sum(weights)!r}, not 1"
        return None

    def require(self, request: ReleaseRequest, refusal: type[ReleaseRefused]) -> None:
        """Raise ``refusal`` unless the plan allows ``request`` now (a party's self-check)."""
        reason = self.reason(request)
        if reason is not None:
            raise refusal(f"round {request.round_id}, {request.purpose}: {reason}")

    # -- advancing -------------------------------------------------------------------

    def record(self, request: ReleaseRequest, values: np.ndarray | None) -> None:
        """Advance on a release the plan allowed (``values``: what was opened)."""
        step = self.step_of(request)
        if step == "publication":
            self.phase = "done"
        elif step == "moments":
            self._record_moments(request, values)
        elif step == "copies":
            self._record_distance(request, values)
        elif step in ("ranking", "final", "evidence"):
            self._record_score(request, step, values)

    def _record_moments(self, request: ReleaseRequest, values: np.ndarray | None) -> None:
        if self.roster is None:
            self.roster = self.subset = tuple(sorted(request.contributors))
        subset = self.subset or ()
        moment = np.asarray(values, dtype=np.float64).reshape(self.plan.num_classes, -1)
        cov = pooled_covariance(
            second_moment=moment, count=len(subset), samples=self.plan.moment_samples
        )
        self.whiten = whitening(cov, ridge=self.plan.ridge, rows=self.plan.num_samples)
        self.phase = "final"

    def _record_score(self, request: ReleaseRequest, step: str, values: np.ndarray | None) -> None:
        if self.roster is None:
            self.roster = tuple(sorted(request.roster or ()))
        value = float(np.asarray(values, dtype=np.float64).reshape(-1)[0])
        self.pass_scores[request.contributors[0]] = value
        if set(self.pass_scores) != set(self.roster):
            return
        scores, self.pass_scores = self.pass_scores, {}
        if step == "ranking":
            self.ranking_scores = scores
            h = self.plan.subset_size(len(self.roster))
            self.subset = tuple(lowest_scores(scores, h))
            self.phase = "moments"
        elif step == "final":
            self.final_scores = scores
            self.phase = "evidence" if self.plan.evidence_rows else self._after_evidence()
        else:
            self.evidence = scores
            self.phase = self._after_evidence()

    def _after_evidence(self) -> str:
        return "copies" if self.plan.copies else "publication"

    def _record_distance(self, request: ReleaseRequest, values: np.ndarray | None) -> None:
        """Keep one pair's distance (``None``: not seen, the aggregator's side); count at the end.

        A decrypted distance below 0 is CKKS noise around an exact copy (clamped to 0).
        """
        if self.copy_set is None:
            self.copy_set = tuple(sorted(request.roster or ()))
        pair = tuple(sorted(request.contributors))
        value = None
        if values is not None:
            found = float(np.asarray(values, dtype=np.float64).reshape(-1)[0])
            value = max(0.0, found) if math.isfinite(found) else sys.float_info.max
        self.distances[(pair[0], pair[1])] = value
        size = len(self.copy_set)
        if len(self.distances) < size * (size - 1) // 2:
            return
        known = {p: d for p, d in self.distances.items() if d is not None}
        if len(known) == len(self.distances):
            self.copies = near_duplicates(known, self.copy_set)
        self.phase = "publication"

    def whitening_claim(self, step: str) -> tuple[tuple[float, ...], ...] | None:
        """Return the whitening of ``step`` as a request names it (``None`` for ranking)."""
        if step != "final":
            return None
        if self.whiten is None:
            raise ScoringInvalid("no covariance was opened yet: no whitening to use")
        return _as_tuple(self.whiten)


@dataclass
class PlanBook:
    """A gatekeeper's plans, one per round: an observing ``ReleaseRule``.

    Parameters
    ----------
    min_participants
        The gatekeeper's own minimum: a plan asking for fewer is refused.
    shape
        ``(N, C)`` of the uploads, when the gatekeeper knows it: a plan naming
        another shape is refused.
    enrolled
        Participants the gatekeeper knows (``None``: the key authority, which
        learns them from the plan's first roster).
    journal
        Where every installed plan and observed release is written before the
        gatekeeper answers (:class:`~secure_fed.secure.plan_journal.PlanJournal`);
        replayed here at start, so a restarted gatekeeper resumes each round's state
        machine where it was. ``None``: memory only (a party that never restarts).
    policy
        The consortium's pinned, signed policy
        (:class:`~secure_fed.secure.consortium_policy.PolicyPin`): a plan outside it
        is refused with :class:`~secure_fed.errors.PlanOutsidePolicy`, never raised
        to fit. ``None``: only the gatekeeper's own bounds (a library use without a
        consortium; every deployment and the demo pin one).

    Raises
    ------
    ModeSetupInvalid
        If the journal holds an altered or invalid plan.
    """

    min_participants: int
    enrolled: frozenset[str] | None = None
    shape: tuple[int, int] | None = None
    trackers: dict[int, PlanTracker] = field(default_factory=dict)
    journal: PlanJournal | None = field(default=None, repr=False)
    policy: PolicyPin | None = field(default=None, repr=False)
    published: list[dict[str, float]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.journal is None:
            return
        for round_id, data in self.journal.plans():
            self.trackers[round_id] = PlanTracker(
                plan=ReleasePlan.from_bytes(data), enrolled=self.enrolled
            )
        replayed = 0
        for request, values in self.journal.releases():
            tracker = self.trackers.get(request.round_id)
            if tracker is not None:
                self._note(tracker, request)
                tracker.record(request, values)
                replayed += 1
        if self.trackers:
            _log.info(
                "plan journal: %d plans and %d releases replayed", len(self.trackers), replayed
            )

    def install(self, plan: ReleasePlan) -> PlanTracker:
        """Fix ``plan`` for its round: once, before anything of that round is opened.

        Under a consortium policy, a plan outside it is refused. Without one, a
        plan below the gatekeeper's ``min_participants`` is raised to it (the
        caller adopts the returned tracker's plan). Sending the same plan again is
        accepted and changes nothing.

        Raises
        ------
        PlanOutsidePolicy
            The plan opens more than the pinned policy allows.
        ModeSetupInvalid
            A second plan for the round, or one below the gatekeeper's minimum.
        """
        if self.policy is not None:
            self.policy.policy.require_plan(plan)
        elif plan.min_participants < self.min_participants:
            plan = replace(plan, min_participants=self.min_participants)
        existing = self.trackers.get(plan.round_id)
        if existing is not None and existing.plan == plan:
            return existing  # the same plan sent again (an aggregator restart): no change
        if existing is not None:
            raise ModeSetupInvalid(f"round {plan.round_id} already has a release plan")
        reason = self._bounds_reason(plan)
        if reason is not None:
            raise ModeSetupInvalid(f"release plan of round {plan.round_id} refused: {reason}")
        tracker = PlanTracker(plan=plan, enrolled=self.enrolled)
        if self.journal is not None:  # written before the plan is in force or answered
            self.journal.record_plan(plan.round_id, plan.to_bytes())
        self.trackers[plan.round_id] = tracker
        _log.info("release plan installed for round %d", plan.round_id)
        return tracker

    def _bounds_reason(self, plan: ReleasePlan) -> str | None:
        """Check the gatekeeper's own bounds: a plan may narrow what is opened, never widen it."""
        if plan.weight_floor < WEIGHT_FLOOR:
            return f"weight floor {plan.weight_floor!r} is below the codec's {WEIGHT_FLOOR!r}"
        if plan.moment_samples < min(plan.num_samples, MIN_MOMENT_ROWS):
            return f"{plan.moment_samples} rows: scores must average over more samples"
        if 0 < plan.evidence_rows < min(plan.num_samples, MIN_EVIDENCE_ROWS):
            return f"{plan.evidence_rows} evidence rows: the evidence must average over more rows"
        if self.shape is not None and (plan.num_samples, plan.num_classes) != self.shape:
            return f"upload shape {(plan.num_samples, plan.num_classes)} is not {self.shape}"
        return None

    def tracker(self, round_id: int) -> PlanTracker | None:
        """Return the tracker of ``round_id``, if a plan was installed."""
        return self.trackers.get(round_id)

    def __call__(self, request: ReleaseRequest) -> str | None:
        """Refusal reason of the round's plan (no plan: refused)."""
        tracker = self.trackers.get(request.round_id)
        if tracker is None:
            return f"no release plan was fixed for round {request.round_id}"
        reason = tracker.reason(request)
        if reason is None and self.policy is not None and tracker.step_of(request) == "publication":
            policy = self.policy.policy
            reason = isolation_reason(
                self.published,
                dict(zip(request.contributors, request.weights or (), strict=False)),
                policy.participant_ids,
                below=policy.isolation,
            )
        return reason

    def observe(self, request: ReleaseRequest, values: np.ndarray | None) -> None:
        """Advance the round's tracker on a release (journalled first, when there is one)."""
        tracker = self.trackers.get(request.round_id)
        if tracker is not None:
            if self.journal is not None:
                self.journal.record_release(request, values)
            self._note(tracker, request)
            tracker.record(request, values)

    def _note(self, tracker: PlanTracker, request: ReleaseRequest) -> None:
        """Keep a publication's weights for the multi-round rule (refused ones count too)."""
        if tracker.step_of(request) == "publication":
            weights = request.weights or ()
            self.published.append(dict(zip(request.contributors, weights, strict=False)))
