"""The release requests both sides build alike: one participant's score, one pair's distance.

The aggregator sends them and the gatekeeper builds the same request itself from the
plan before it opens anything, so the two must agree field for field.
"""

from __future__ import annotations

from collections.abc import Sequence

from secure_fed.secure.protocol.vocabulary import Purpose, Step
from secure_fed.secure.release_policy import ReleaseRequest

__all__ = ["distance_request", "score_request"]


def score_request(
    *,
    round_id: int,
    step: str,
    participant: str,
    roster: Sequence[str],
    centre: Sequence[str],
    samples: int,
    whitening: tuple[tuple[float, ...], ...] | None,
) -> ReleaseRequest:
    """Build the release request of one participant's scalar score at ``step`` (both modes)."""
    return ReleaseRequest(
        round_id=round_id,
        purpose=Purpose.SCORE,
        contributors=(participant,),
        value_kind="score",
        shape=(1,),
        step=step,
        roster=tuple(roster),
        centre=tuple(centre),
        samples=samples,
        whitening=whitening,
    )


def distance_request(
    *, round_id: int, pair: tuple[str, str], members: Sequence[str], samples: int
) -> ReleaseRequest:
    """Build the release request of one pair's distance at the plan's ``copies`` step."""
    return ReleaseRequest(
        round_id=round_id,
        purpose=Purpose.DISTANCE,
        contributors=pair,
        value_kind="score",
        shape=(1,),
        step=Step.COPIES,
        roster=tuple(members),
        samples=samples,
    )
