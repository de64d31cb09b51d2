"""The release plan's state machine on the values opened so far (aggregator and gatekeepers).

:class:`PlanTracker` says which plan step a request is, why the plan refuses it
now, and advances on each release (the scores, the covariance and its
whitening, the evidence, the near-duplicate counts, the publication).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from secure_fed.errors import ReleaseRefused, ScoringInvalid
from secure_fed.secure.protocol.vocabulary import Purpose, Step
from secure_fed.secure.release_plan_core import CAP_TOLERANCE, WHITENING_RTOL, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import copies_threshold, near_duplicates, round_typical
from secure_fed.secure.scoring.mahalanobis import (
    lowest_scores,
    pooled_covariance,
    whitening,
)
from secure_fed.secure.scoring.outlier import impossible_score

__all__ = ["PlanTracker"]


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
    copies_typical: float | None = None
    _subset_cov: np.ndarray | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.plan.scored:
            self.phase = Step.PUBLICATION
        else:
            self.phase = Step.RANKING if self.plan.ranking else Step.MOMENTS

    def step_of(self, request: ReleaseRequest) -> str | None:
        """Return the plan step ``request`` asks for (``None``: none, e.g. a mean)."""
        if request.purpose == Purpose.SCORE:
            return (
                request.step if request.step in (Step.RANKING, Step.FINAL, Step.EVIDENCE) else None
            )
        steps: dict[str, str] = {
            Purpose.MOMENTS: Step.MOMENTS,
            Purpose.AGGREGATE: Step.PUBLICATION,
            Purpose.DISTANCE: Step.COPIES,
        }
        return steps.get(request.purpose)

    def rows(self, step: str) -> int:
        """Rows a score or moment of ``step`` averages over."""
        if step == Step.EVIDENCE:
            return self.plan.evidence_rows
        full = step in (Step.FINAL, Step.COPIES)
        return self.plan.num_samples if full else self.plan.moment_samples

    def reason(self, request: ReleaseRequest) -> str | None:
        """Why the plan refuses ``request`` now, or ``None``."""
        if request.round_id != self.plan.round_id:
            return f"the plan is for round {self.plan.round_id}"
        if request.purpose == Purpose.MEAN:
            return "the release plan opens no means (they stay encrypted / shared)"
        step = self.step_of(request)
        if step is None:
            return f"purpose {request.purpose!r} (step {request.step!r}) is not in the plan"
        if step != self.phase:
            return f"the plan allows {self.phase!r} now, not {step!r}"
        if step == Step.PUBLICATION:
            return self._publication_reason(request)
        if step == Step.EVIDENCE:
            return self._evidence_reason(request)
        if step == Step.COPIES:
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
        roster = request.contributors if step == Step.MOMENTS else request.roster
        if step == Step.MOMENTS and self.subset is not None:
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
        if step == Step.RANKING:
            wanted_centre = tuple(sorted(request.roster or ()))
        elif step == Step.MOMENTS and self.subset is None:
            wanted_centre = tuple(sorted(request.contributors))
        if request.centre is None or tuple(sorted(request.centre)) != wanted_centre:
            return f"{step}: the centre must be the mean of {list(wanted_centre)}"
        if request.samples != self.rows(step):
            return f"{step}: the plan fixes {self.rows(step)} rows, not {request.samples}"
        if step == Step.MOMENTS:
            return None
        pid = request.contributors[0]
        if pid in self.pass_scores or pid not in (request.roster or ()):
            return f"{step}: {pid!r} is not an unscored member of the roster"
        return self._whitening_reason(request, step)

    def _whitening_reason(self, request: ReleaseRequest, step: str) -> str | None:
        claimed = None if request.whitening is None else np.asarray(request.whitening)
        c = self.plan.num_classes
        if step == Step.RANKING:
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
        # the influence bound: one upload may flip at most max_flagged others' factors
        counted = sorted(p for p in excluded if not impossible_score(self.final_scores[p]))
        if self.plan.max_flagged is not None and len(counted) > self.plan.max_flagged:
            return (
                f"{len(counted)} excluded on their scores ({counted}): the plan allows "
                f"{self.plan.max_flagged} (max_flagged)"
            )
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
        if step == Step.PUBLICATION:
            self.phase = Step.DONE
        elif step == Step.MOMENTS:
            self._record_moments(request, values)
        elif step == Step.COPIES:
            self._record_distance(request, values)
        elif step in (Step.RANKING, Step.FINAL, Step.EVIDENCE):
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
        self._subset_cov = cov
        self.phase = Step.FINAL

    def _record_score(self, request: ReleaseRequest, step: str, values: np.ndarray | None) -> None:
        if self.roster is None:
            self.roster = tuple(sorted(request.roster or ()))
        value = float(np.asarray(values, dtype=np.float64).reshape(-1)[0])
        self.pass_scores[request.contributors[0]] = value
        if set(self.pass_scores) != set(self.roster):
            return
        scores, self.pass_scores = self.pass_scores, {}
        if step == Step.RANKING:
            self.ranking_scores = scores
            h = self.plan.subset_size(len(self.roster))
            self.subset = tuple(lowest_scores(scores, h))
            self.phase = Step.MOMENTS
        elif step == Step.FINAL:
            self.final_scores = scores
            self._set_copies_typical()
            self.phase = Step.EVIDENCE if self.plan.evidence_rows else self._after_evidence()
        else:
            self.evidence = scores
            self.phase = self._after_evidence()

    def _set_copies_typical(self) -> None:
        """After the final scores: the round's typical pair distance (ranked rounds only).

        :func:`~secure_fed.secure.scoring.evidence.round_typical` of the opened
        moments, the final scores and the whitening; without a ranking pass ``H``
        is everybody (far uploads included) and the copy threshold stays the floor.
        """
        subset = self.subset or ()
        if self.plan.ranking and self._subset_cov is not None and len(subset) >= 2:
            assert self.whiten is not None
            self.copies_typical = round_typical(
                covariance=self._subset_cov,
                subset=len(subset),
                scores=self.final_scores,
                whiten=self.whiten,
            )

    def _after_evidence(self) -> str:
        return Step.COPIES if self.plan.copies else Step.PUBLICATION

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
            self.copies = near_duplicates(known, self.copy_set, threshold=self.copies_threshold())
        self.phase = Step.PUBLICATION

    def copies_threshold(self) -> float:
        """Return this round's copy threshold: from the opened scoring values, else the floor.

        :func:`~secure_fed.secure.scoring.evidence.copies_threshold` of the typical
        distance recorded with the final scores (``None`` before them or without
        a ranking pass: the floor); each party derives it from its own tracker,
        so no party chooses it for another.
        """
        return copies_threshold(self.copies_typical)

    def whitening_claim(self, step: str) -> tuple[tuple[float, ...], ...] | None:
        """Return the whitening of ``step`` as a request names it (``None`` for ranking)."""
        if step != Step.FINAL:
            return None
        if self.whiten is None:
            raise ScoringInvalid("no covariance was opened yet: no whitening to use")
        return _as_tuple(self.whiten)
