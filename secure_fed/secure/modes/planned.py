"""What the two gatekept modes (ckks, shares) share: scoring under the round's release plan.

Both aggregators fix each round's :class:`~secure_fed.secure.release_plan.ReleasePlan`
with their gatekeeper (:meth:`begin_round`, mode-specific) and score through a
per-round backend (:meth:`scoring_round`, mode-specific); the robust pooled
Mahalanobis procedure and the plan bookkeeping around it are the same, so they
live here once. So do the evidence step's requests: one per roster member, with
the slice the round's plan names (:meth:`PlannedAggregator.evidence_asks`), and
the copies step's: one pair distance per pair of the accepted set
(:meth:`PlannedAggregator.distance_asks`), of which the gatekeeper releases only
the near-duplicate counts (:func:`adopt_counts`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import replace
from itertools import combinations

import numpy as np

from secure_fed.errors import ReleaseRefused, ScoringInvalid
from secure_fed.secure.computation.requests import distance_request, score_request
from secure_fed.secure.mode import SecureAggregator, UploadHandle
from secure_fed.secure.protocol.vocabulary import Step
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.mahalanobis import (
    ScoreReport,
    ScoringBackend,
    ScoringConfig,
    pooled_mahalanobis,
)

__all__ = ["PlannedAggregator", "adopt_counts"]


def adopt_counts(tracker: PlanTracker, counts: np.ndarray) -> dict[str, int]:
    """Return the gatekeeper's near-duplicate counts by id; the tracker keeps them.

    ``counts`` is the reply to the copies step's last pair: one count per member
    of the copy set, in its sorted order.

    Raises
    ------
    ScoringInvalid
        If the step is not complete or ``counts`` is not one integer in ``[0, n)``
        per member.
    """
    members = tracker.copy_set or ()
    values = np.asarray(counts, dtype=np.float64).reshape(-1)
    if tracker.phase == Step.COPIES or values.shape != (len(members),):
        raise ScoringInvalid(f"the gatekeeper's copies reply has shape {values.shape}")
    if not all(v == int(v) and 0 <= v < len(members) for v in values):
        raise ScoringInvalid(f"near-duplicate counts must be integers in [0, {len(members)})")
    tracker.copies = {p: int(v) for p, v in zip(members, values, strict=True)}
    return dict(tracker.copies)


class PlannedAggregator(SecureAggregator):
    """A secure aggregator whose every opening follows a per-round release plan.

    Subclasses set ``shape``, ``scoring``, ``min_participants`` and an empty
    ``_plans`` mapping in their constructor, and implement :meth:`begin_round`
    (fix the plan with the gatekeeper and store its tracker in ``_plans``) and
    :meth:`scoring_round` (the per-round scoring backend).
    """

    shape: tuple[int, int]
    scoring: ScoringConfig
    min_participants: int
    _plans: dict[int, PlanTracker]

    @abstractmethod
    def begin_round(self, plan: ReleasePlan) -> None:
        """Fix ``plan`` with the gatekeeper and track it in ``_plans``."""

    @abstractmethod
    def scoring_round(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> ScoringBackend:
        """Return the per-round scoring backend over ``handles``."""

    def score(self, handles: Mapping[str, UploadHandle], *, round_id: int) -> ScoreReport:
        """Robust pooled Mahalanobis score under the round's plan (``h`` from the plan)."""
        plan = self._tracker(round_id, scored=True).plan
        config = replace(
            self.scoring, min_subset=max(self.scoring.min_subset, plan.min_participants)
        )
        backend = self.scoring_round(handles, round_id=round_id)
        return pooled_mahalanobis(
            backend, sorted(handles), num_samples=self.shape[0], config=config
        )

    def evidence_asks(
        self,
        handles: Mapping[str, UploadHandle],
        mask: np.ndarray,
        *,
        round_id: int,
        refusal: type[ReleaseRefused],
    ) -> tuple[PlanTracker, EvidenceSlice, list[ReleaseRequest]]:
        """Return the round's tracker, its slice and one allowed evidence request per upload.

        ``handles`` must be the scored roster and ``mask`` the mask of the plan's
        slice (the engine's); this side refuses anything else before a gatekeeper
        is asked.

        Raises
        ------
        ScoringInvalid
            If the round's plan has no slice, or ``mask`` is not its mask.
        ReleaseRefused
            ``refusal``, if the plan does not allow the evidence of every upload now.
        """
        tracker = self._tracker(round_id, scored=True)
        piece = tracker.plan.evidence
        if piece is None:
            raise ScoringInvalid(f"the release plan of round {round_id} has no labeled slice")
        if not np.array_equal(np.asarray(mask), piece.mask(self.shape)):
            raise ScoringInvalid("the evidence mask is not the mask of the plan's labeled slice")
        ids = sorted(handles)
        asks = [
            replace(
                score_request(
                    round_id=round_id,
                    step=Step.EVIDENCE,
                    participant=pid,
                    roster=ids,
                    centre=(),
                    samples=len(piece.rows),
                    whitening=None,
                ),
                centre=None,
                evidence=piece,
            )
            for pid in ids
        ]
        for ask in asks:
            tracker.require(ask, refusal)
        return tracker, piece, asks

    def distance_asks(
        self,
        handles: Mapping[str, UploadHandle],
        *,
        round_id: int,
        refusal: type[ReleaseRefused],
    ) -> tuple[PlanTracker, list[ReleaseRequest]] | None:
        """Return the round's tracker and one allowed distance request per pair of ``handles``.

        ``None`` when the round's plan has no ``copies`` step.

        Raises
        ------
        ReleaseRefused
            ``refusal``, if the plan does not allow every pair now.
        """
        tracker = self._tracker(round_id, scored=True)
        if not tracker.plan.copies:
            return None
        ids = sorted(handles)
        asks = [
            distance_request(round_id=round_id, pair=pair, members=ids, samples=self.shape[0])
            for pair in combinations(ids, 2)
        ]
        for ask in asks:
            tracker.require(ask, refusal)
        return tracker, asks

    def _tracker(self, round_id: int, *, scored: bool) -> PlanTracker:
        """Return the round's plan tracker; fix a default plan (the scoring config's) first."""
        if round_id not in self._plans:
            self.begin_round(
                ReleasePlan.for_round(
                    round_id=round_id,
                    min_participants=self.min_participants,
                    shape=self.shape,
                    scoring=self.scoring,
                    scored=scored,
                )
            )
        return self._plans[round_id]
