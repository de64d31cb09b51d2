"""A gatekeeper's release plans, one per round: an observing release rule.

:class:`PlanBook` installs each round's plan once (journalled), checks it
against the gatekeeper's own bounds and pinned consortium policy, and refuses
or advances each release through the round's
:class:`~secure_fed.secure.plan_tracker.PlanTracker`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

import numpy as np

from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.consortium_policy import (
    MIN_EVIDENCE_ROWS,
    MIN_MOMENT_ROWS,
    PolicyPin,
)
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.plan_tracker import PlanTracker
from secure_fed.secure.protocol.vocabulary import Step
from secure_fed.secure.release_plan_core import WEIGHT_FLOOR, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.roster_rule import isolation_reason

__all__ = ["PlanBook"]

#: The plans' log keeps the name it had before the split (operators filter on it).
_log = logging.getLogger("secure_fed.secure.release_plan")


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
        if (
            reason is None
            and self.policy is not None
            and tracker.step_of(request) == Step.PUBLICATION
        ):
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
        if tracker.step_of(request) == Step.PUBLICATION:
            weights = request.weights or ()
            self.published.append(dict(zip(request.contributors, weights, strict=False)))
