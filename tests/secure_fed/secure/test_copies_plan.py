"""The release plan's ``copies`` step: one distance per pair of the copy set, kept, counted.

Near-duplicate detection (secure_fed.secure.scoring.evidence) decrypts one pair
distance per pair of the copy set (the accepted set) after the final scores and
the evidence, before the publication; the gatekeeper keeps every distance and
releases only the count per member. Anything else is refused.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import numpy as np
import pytest

from secure_fed.errors import DecryptionRefused, ModeSetupInvalid, ScoringInvalid
from secure_fed.secure.computation.requests import distance_request
from secure_fed.secure.modes.planned import adopt_counts
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleasePolicy, ReleaseRequest
from secure_fed.secure.scoring.evidence import near_duplicates, pairwise_distances
from secure_fed.secure.scoring.mahalanobis import PlainBackend, ScoringConfig
from tests.secure_fed.secure.helpers import population
from tests.secure_fed.secure.test_release_plan import (
    IDS,
    PLAN,
    C,
    N,
    _moments,
    _publication,
    _score,
)
from tests.secure_fed.secure.test_release_plan_evidence import SLICE, _evidence

COPIES_PLAN = replace(PLAN, copies=True)
NOT_A_PAIR = "a distance is between two distinct members of the copy set"
NO_CENTRE = "a pair distance has no centre and no whitening (W = I)"
WEIGHTS = (0.2,) * 5


def _preds() -> dict[str, np.ndarray]:
    """Five participants; ``d`` and ``e`` send ``c``'s matrix."""
    preds = dict(zip(IDS, population(5, N, C, seed=2).values(), strict=True))
    preds["d"] = preds["c"].copy()
    preds["e"] = preds["c"].copy()
    return preds


def _pair(a: str, b: str, **changes: object) -> ReleaseRequest:
    ask = distance_request(round_id=3, pair=(a, b), members=IDS, samples=N)
    return replace(ask, **changes)  # type: ignore[arg-type]


def _scored(plan: ReleasePlan = COPIES_PLAN) -> tuple[PlanTracker, dict[str, np.ndarray]]:
    """Run the scoring passes; the final scores use the whitening the tracker derived."""
    preds = _preds()
    tracker = PlanTracker(plan=plan, enrolled=frozenset(IDS))
    backend = PlainBackend(preds)
    for pid, s in backend.ranking_scores(list(IDS), 400).items():
        tracker.record(_score(pid, "ranking"), np.array([s]))
    subset = tracker.subset or ()
    tracker.record(_moments(subset), backend.moments(list(subset), 400))
    w = tracker.whiten
    assert w is not None
    for pid, s in backend.final_scores(list(IDS), list(subset), w).items():
        request = _score(pid, "final", centre=subset, whiten=w)
        assert tracker.reason(request) is None
        tracker.record(request, np.array([s]))
    return tracker, preds


def test_copies_come_after_the_final_scores_and_count_only_at_the_last_pair() -> None:
    tracker, preds = _scored()
    assert tracker.phase == "copies"
    assert "'copies' now, not 'publication'" in str(tracker.reason(_publication(IDS, WEIGHTS)))
    distances = pairwise_distances(preds)
    for a, b in combinations(IDS, 2):
        assert tracker.reason(_pair(a, b)) is None
        assert not tracker.copies  # nothing is counted before the last pair
        tracker.record(_pair(a, b), np.array([distances[(a, b)]]))
    assert (
        tracker.copies
        == near_duplicates(distances, IDS)
        == {
            "a": 0,
            "b": 0,
            "c": 2,
            "d": 2,
            "e": 2,
        }
    )
    assert tracker.phase == "publication"
    assert "not 'copies'" in str(tracker.reason(_pair("a", "b")))  # no second release
    assert tracker.reason(_publication(IDS, WEIGHTS)) is None
    fewer = _publication(IDS[:4], (0.25,) * 4)  # counted over five, published over four
    assert "must cover the copy set" in str(tracker.reason(fewer))


def test_with_a_labeled_slice_the_copies_follow_the_evidence() -> None:
    fresh = PlanTracker(plan=COPIES_PLAN, enrolled=frozenset(IDS))
    assert "'ranking' now, not 'copies'" in str(fresh.reason(_pair("a", "b")))  # before scoring
    tracker, preds = _scored(replace(COPIES_PLAN, evidence=SLICE))
    assert tracker.phase == "evidence"
    assert "'evidence' now, not 'copies'" in str(tracker.reason(_pair("a", "b")))
    for pid in IDS:
        tracker.record(_evidence(pid), np.array([0.5]))
    assert tracker.phase == "copies" and tracker.reason(_pair("a", "b")) is None


def test_a_plan_without_the_step_refuses_every_distance() -> None:
    tracker, _ = _scored(PLAN)
    assert tracker.phase == "publication"
    assert "not 'copies'" in str(tracker.reason(_pair("a", "b")))
    as_score = replace(_pair("a", "b"), purpose="score", contributors=("b",), centre=("a",))
    assert "is not in the plan" in str(tracker.reason(as_score))  # a distance is no score


@pytest.mark.parametrize(
    ("pair", "changes", "reason"),
    [
        (("a", "x"), {}, f"copies: {NOT_A_PAIR}"),
        (("a", "a"), {}, f"copies: {NOT_A_PAIR}"),
        (("a", "b"), {"contributors": ("a", "b", "c")}, f"copies: {NOT_A_PAIR}"),
        (
            ("a", "x"),
            {"roster": ("a", "b", "c", "d", "x")},
            "copies: participants ['x'] are not in the round's roster",
        ),
        (("a", "b"), {"roster": ("a", "b")}, "copies: the copy set needs 3 distinct participants"),
        (
            ("a", "b"),
            {"roster": ("a", "b", "c")},
            "copies: ['d', 'e'] scored below the exclusion floor and must be published",
        ),
        (("a", "b"), {"centre": ("a",)}, f"copies: {NO_CENTRE}"),
        (("a", "b"), {"whitening": ((1.0,),)}, f"copies: {NO_CENTRE}"),
        (("a", "b"), {"samples": 400}, f"copies: the plan fixes {N} rows, not 400"),
        (("a", "b"), {"round_id": 4}, "the plan is for round 3"),
    ],
)
def test_a_pair_outside_the_copy_set_or_the_plans_form_is_refused(
    pair: tuple[str, str], changes: dict[str, object], reason: str
) -> None:
    tracker, _ = _scored()
    assert tracker.reason(replace(_pair(*pair), **changes)) == reason  # type: ignore[arg-type]
    assert tracker.phase == "copies" and not tracker.distances


def test_each_pair_once_and_the_copy_set_fixed_by_the_first_pair() -> None:
    tracker, _ = _scored()
    tracker.record(_pair("a", "b"), np.array([3.0]))
    assert "already decrypted" in str(tracker.reason(_pair("a", "b")))
    assert "already decrypted" in str(tracker.reason(_pair("b", "a")))  # the same pair
    other = _pair("a", "c", roster=("a", "b", "c", "d"))  # a minority left out, but not fixed
    assert tracker.reason(other) == "copies: the copy set differs from the fixed one"


def test_noise_below_zero_counts_as_a_copy_and_the_aggregator_sees_no_distance() -> None:
    """The gatekeeper clamps CKKS noise around 0; the aggregator's tracker (no values)
    learns the counts only from the gatekeeper's reply, checked."""
    gate, _ = _scored()
    mine, _ = _scored()
    values = dict.fromkeys(combinations(IDS, 2), 4.0)
    values[("c", "d")] = -3e-4  # an encrypted zero, decrypted
    for pair, d in values.items():
        gate.record(_pair(*pair), np.array([d]))
        mine.record(_pair(*pair), None)
    assert gate.copies == {"a": 0, "b": 0, "c": 1, "d": 1, "e": 0}
    assert mine.phase == "publication" and not mine.copies
    assert set(mine.distances.values()) == {None}
    with pytest.raises(ScoringInvalid, match="integers in"):
        adopt_counts(mine, np.array([0, 0, 5, 1, 0]))
    with pytest.raises(ScoringInvalid, match="shape"):
        adopt_counts(mine, np.zeros(0))
    reply = np.array([gate.copies[p] for p in IDS], dtype=np.float64)
    assert adopt_counts(mine, reply) == gate.copies == mine.copies


@pytest.mark.parametrize("garbage", [np.nan, np.inf, -np.inf])
def test_a_distance_that_decrypts_to_no_number_is_never_a_copy(garbage: float) -> None:
    # a NaN is not "below zero": clamping it with max(0, d) would make it an exact copy
    tracker, _ = _scored()
    values = dict.fromkeys(combinations(IDS, 2), 4.0)
    values[("c", "d")] = garbage
    for pair, d in values.items():
        tracker.record(_pair(*pair), np.array([d]))
    assert tracker.copies == dict.fromkeys(IDS, 0)


def test_a_distance_is_one_scalar_of_exactly_two_participants() -> None:
    policy = ReleasePolicy(party="key_authority", min_participants=3, refusal=DecryptionRefused)
    assert policy.reason(_pair("a", "b")) is None
    for ids in (("a",), ("a", "b", "c"), ("a", "a")):
        found = str(policy.reason(replace(_pair("a", "b"), contributors=ids)))
        assert "exactly two distinct" in found or "ids repeat" in found
    assert "one scalar" in str(policy.reason(replace(_pair("a", "b"), shape=(2,))))
    assert "never released" in str(policy.reason(replace(_pair("a", "b"), value_kind="upload")))
    assert "needs a 'score' value" in str(
        policy.reason(replace(_pair("a", "b"), value_kind="aggregate"))
    )
    assert "contributor count 2" in str(policy.reason(replace(_pair("a", "b"), counted=2)))


def test_the_plan_carries_the_step_only_when_scored() -> None:
    assert ReleasePlan.from_bytes(COPIES_PLAN.to_bytes()) == COPIES_PLAN
    assert ReleasePlan.from_bytes(PLAN.to_bytes()).copies is False
    with pytest.raises(ModeSetupInvalid, match="copies"):
        replace(COPIES_PLAN, scored=False)
    with pytest.raises(ModeSetupInvalid, match="copies"):
        replace(PLAN, copies=1)  # type: ignore[arg-type]
    unscored = ReleasePlan.for_round(
        round_id=1,
        min_participants=3,
        shape=(N, C),
        scoring=ScoringConfig(moment_samples=400),
        scored=False,
        copies=True,
    )
    assert unscored.copies is False
