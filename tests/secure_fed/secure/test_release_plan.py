"""The release plan's state machine: every allowed step and every refusal branch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.release_plan import PlanBook, PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.mahalanobis import (
    PlainBackend,
    ScoringConfig,
    pooled_covariance,
    pooled_mahalanobis,
    whitening,
)
from tests.secure_fed.secure.helpers import population

N, C = 600, 4
IDS = ("a", "b", "c", "d", "e")
PLAN = ReleasePlan.for_round(
    round_id=3, min_participants=3, shape=(N, C), scoring=ScoringConfig(moment_samples=400)
)


def _score(
    pid: str, step: str, centre=IDS, roster=IDS, samples=None, whiten=None
) -> ReleaseRequest:  # type: ignore[no-untyped-def]
    rows = samples if samples is not None else (400 if step == "ranking" else N)
    claim = None if whiten is None else tuple(tuple(float(x) for x in r) for r in whiten)
    return ReleaseRequest(
        round_id=3,
        purpose="score",
        contributors=(pid,),
        value_kind="score",
        shape=(1,),
        step=step,
        roster=roster,
        centre=centre,
        samples=rows,
        whitening=claim,
    )


def _moments(ids: tuple[str, ...]) -> ReleaseRequest:
    return ReleaseRequest(
        round_id=3,
        purpose="moments",
        contributors=ids,
        value_kind="aggregate",
        shape=(C, C),
        centre=ids,
        samples=400,
    )


def _publication(ids: tuple[str, ...], weights) -> ReleaseRequest:  # type: ignore[no-untyped-def]
    return ReleaseRequest(
        round_id=3,
        purpose="aggregate",
        contributors=ids,
        value_kind="aggregate",
        shape=(N, C),
        weights=weights,
    )


def _through_scores(tracker: PlanTracker, preds) -> tuple[tuple[str, ...], np.ndarray]:  # type: ignore[no-untyped-def]
    backend = PlainBackend(preds)
    for pid, s in backend.ranking_scores(list(IDS), 400).items():
        assert tracker.reason(_score(pid, "ranking")) is None
        tracker.record(_score(pid, "ranking"), np.array([s]))
    subset = tracker.subset
    assert subset is not None and tracker.phase == "moments"
    moment = backend.moments(list(subset), 400)
    assert tracker.reason(_moments(subset)) is None
    tracker.record(_moments(subset), moment)
    w = whitening(
        pooled_covariance(second_moment=moment, count=len(subset), samples=400), ridge=1e-6
    )
    for pid, s in backend.final_scores(list(IDS), list(subset), w).items():
        request = _score(pid, "final", centre=subset, whiten=w)
        assert tracker.reason(request) is None
        tracker.record(request, np.array([s]))
    return subset, w


def test_the_plan_derives_what_pooled_mahalanobis_computes() -> None:
    preds = population(5, N, C, seed=1, attackers=1, attack="scaling")
    preds = dict(zip(IDS, preds.values(), strict=True))
    tracker = PlanTracker(plan=PLAN, enrolled=frozenset(IDS))
    subset, w = _through_scores(tracker, preds)
    report = pooled_mahalanobis(
        PlainBackend(preds),
        list(IDS),
        num_samples=N,
        config=ScoringConfig(moment_samples=400, min_subset=3),
    )
    assert subset == report.subset and tracker.final_scores == report.scores
    np.testing.assert_array_equal(tracker.whiten, w)
    assert tracker.phase == "publication"
    weights = (0.25, 0.25, 0.25, 0.25)
    assert report.scores["e"] > PLAN.exclude_above  # the scaled attacker may be excluded
    assert tracker.reason(_publication(("a", "b", "c", "d"), weights)) is None
    tracker.record(_publication(("a", "b", "c", "d"), weights), None)
    assert "'done'" in str(tracker.reason(_publication(("a", "b", "c", "d"), weights)))


@pytest.fixture
def scored() -> PlanTracker:
    preds = dict(zip(IDS, population(5, N, C, seed=2).values(), strict=True))
    tracker = PlanTracker(plan=PLAN, enrolled=frozenset(IDS))
    _through_scores(tracker, preds)
    return tracker


@pytest.mark.parametrize(
    ("ids", "weights", "fragment"),
    [
        (("a", "b"), (0.5, 0.5), "needs 3"),
        (("a", "b", "c", "d", "x"), (0.2,) * 5, "not in the round's roster"),
        (("a", "b", "c", "e"), (0.25,) * 4, "below the exclusion floor"),
        (IDS, None, "one public weight"),
        (IDS, (1 - 4e-9, 1e-9, 1e-9, 1e-9, 1e-9), "codec's resolution"),
        (IDS, (0.2, 0.2, 0.2, 0.2, 0.0), "codec's resolution"),
        (IDS, (0.1, 0.1, 0.1, 0.1, 0.1), "sum to"),
    ],
)
def test_publication_refusals(scored: PlanTracker, ids, weights, fragment: str) -> None:  # type: ignore[no-untyped-def]
    assert fragment in str(scored.reason(_publication(ids, weights)))


def test_at_most_a_minority_is_excluded() -> None:
    tracker = PlanTracker(plan=replace(PLAN, min_participants=2, max_weight=0.5))
    tracker.roster, tracker.phase = IDS, "publication"
    tracker.final_scores = {p: 100.0 for p in IDS}  # everybody above the floor
    assert "minority" in str(tracker.reason(_publication(("a", "b"), (0.5, 0.5))))
    assert tracker.reason(_publication(("a", "b", "c"), (0.4, 0.3, 0.3))) is None


def test_a_negative_final_score_may_be_excluded_a_small_one_may_not() -> None:
    """No honest squared distance is negative (in ckks a value beyond the headroom wraps its
    score): the gatekeeper lets the filter exclude it; a small honest score stays published."""
    tracker = PlanTracker(plan=replace(PLAN, min_participants=2))
    tracker.roster, tracker.phase = IDS, "publication"
    weights = (0.25,) * 4
    for score, allowed in ((-7.4e6, True), (-0.5, True), (-0.001, False), (3.0, False)):
        tracker.final_scores = {**dict.fromkeys(IDS, 3.0), "e": score}
        reason = tracker.reason(_publication(("a", "b", "c", "d"), weights))
        assert (reason is None) is allowed, (score, reason)


def test_the_weight_cap_is_enforced() -> None:
    tracker = PlanTracker(plan=replace(PLAN, scored=False, max_weight=0.4))
    assert "cap" in str(tracker.reason(_publication(("a", "b", "c"), (0.5, 0.25, 0.25))))
    assert tracker.reason(_publication(("a", "b", "c"), (0.4, 0.3, 0.3))) is None


def test_the_cap_check_allows_float_rounding_but_no_real_excess() -> None:
    # cap_weights at cap 1/3 over three participants renormalises to 0.33333333333333337,
    # one ulp above 1/3: a published round was refused for it.
    cap = 1 / 3
    tracker = PlanTracker(plan=replace(PLAN, scored=False, max_weight=cap))
    ulp_above = np.nextafter(cap, 1.0)
    assert (
        tracker.reason(_publication(("a", "b", "c"), (ulp_above, ulp_above, 1 - 2 * ulp_above)))
        is None
    )
    assert "cap" in str(
        tracker.reason(_publication(("a", "b", "c"), (cap + 1e-9, cap, cap - 1e-9)))
    )


def test_score_refusals() -> None:
    tracker = PlanTracker(plan=PLAN, enrolled=frozenset(IDS))
    cases = [
        (replace(_score("a", "ranking"), purpose="mean", value_kind="aggregate"), "no means"),
        (_score("a", "final"), "allows 'ranking' now"),
        (_moments(IDS), "allows 'ranking' now"),
        (_publication(IDS, (0.2,) * 5), "allows 'ranking' now"),
        (_score("a", "ranking", roster=("a", "b")), "3 distinct"),
        (_score("x", "ranking", roster=(*IDS[:4], "x")), "not enrolled"),
        (_score("a", "ranking", centre=("a",)), "centre must be the mean"),
        (_score("a", "ranking", samples=1), "fixes 400 rows"),
        (_score("a", "ranking", whiten=np.zeros((C, C))), "W = I"),
        (replace(_score("a", "ranking"), round_id=4), "for round 3"),
        (replace(_score("a", "ranking"), step="other"), "not in the plan"),
    ]
    for request, fragment in cases:
        assert fragment in str(tracker.reason(request)), fragment
    tracker.record(_score("a", "ranking"), np.array([1.0]))
    assert "unscored member" in str(tracker.reason(_score("a", "ranking")))
    assert "roster differs" in str(tracker.reason(_score("b", "ranking", roster=IDS[:4])))


def test_moment_and_final_refusals(scored: PlanTracker) -> None:
    fresh = PlanTracker(plan=PLAN, enrolled=frozenset(IDS))
    for pid, s in zip(IDS, [1.0, 2.0, 3.0, 4.0, 5.0], strict=True):
        fresh.record(_score(pid, "ranking"), np.array([s]))
    assert fresh.subset == ("a", "b", "c")
    assert "plan's subset" in str(fresh.reason(_moments(("a", "b", "d"))))
    other = PlanTracker(plan=replace(PLAN, ranking=False))
    assert other.reason(_moments(IDS)) is None  # no ranking: the subset is everybody


def test_final_scores_need_the_derived_whitening() -> None:
    preds = dict(zip(IDS, population(5, N, C, seed=3).values(), strict=True))
    tracker = PlanTracker(plan=PLAN)
    backend = PlainBackend(preds)
    for pid, s in backend.ranking_scores(list(IDS), 400).items():
        tracker.record(_score(pid, "ranking"), np.array([s]))
    subset = tracker.subset or ()
    tracker.record(_moments(subset), backend.moments(list(subset), 400))
    assert tracker.whiten is not None
    assert "name the whitening" in str(tracker.reason(_score("a", "final", centre=subset)))
    wrong = tracker.whiten * 2
    assert "differs" in str(tracker.reason(_score("a", "final", centre=subset, whiten=wrong)))
    assert "centre" in str(tracker.reason(_score("a", "final", whiten=tracker.whiten)))


def test_the_book_installs_once_and_refuses_rounds_without_a_plan() -> None:
    book = PlanBook(min_participants=3)
    assert "no release plan" in str(book(_score("a", "ranking")))
    book.install(PLAN)
    book.install(PLAN)  # the identical plan again: accepted
    with pytest.raises(ModeSetupInvalid, match="already has"):
        book.install(replace(PLAN, max_weight=0.5))
    assert PlanBook(min_participants=4).install(PLAN).plan.min_participants == 4  # raised
    with pytest.raises(ModeSetupInvalid, match="codec's"):
        PlanBook(min_participants=3).install(replace(PLAN, weight_floor=1e-12))
    with pytest.raises(ModeSetupInvalid, match="average over more"):
        PlanBook(min_participants=3).install(replace(PLAN, moment_samples=1))
    with pytest.raises(ModeSetupInvalid, match="shape"):
        PlanBook(min_participants=3, shape=(N, C + 1)).install(PLAN)
    assert ReleasePlan.from_bytes(PLAN.to_bytes()) == PLAN
    with pytest.raises(ModeSetupInvalid, match="release plan refused"):
        ReleasePlan.from_bytes(b'{"round_id": "x"}')
    with pytest.raises(ModeSetupInvalid, match="max_weight"):
        replace(PLAN, max_weight=2.0)
