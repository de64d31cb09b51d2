"""More guards of the release plan: what a round's plan is built from and how it advances.

``scripts/mutation`` changed each of these and the plan's tests stayed green
(docs/benchmarks.md, "Mutation testing", fourth run): the exclusion floor of a
filter, the plan ``for_round`` builds from a scoring configuration, the subset
size, the canonical bytes the gatekeepers install, the moments of a plan without
a ranking pass, the ranking scores a tracker keeps, the whitening a final score
must name, and the book's ``tracker`` / ``observe``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from scipy.stats import chi2

from secure_fed.errors import OpeningRefused, ScoringInvalid
from secure_fed.secure.release_plan import PlanBook, PlanTracker, ReleasePlan, exclusion_floor
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.mahalanobis import ScoringConfig, pooled_covariance, whitening

N, C = 600, 4
IDS = ("a", "b", "c", "d", "e")


@dataclass
class _Filter:
    high: object


def test_the_exclusion_floor_is_the_filters_threshold_or_the_default_quantile() -> None:
    assert exclusion_floor(_Filter(high=5.5), C) == 5.5
    assert exclusion_floor(_Filter(high=0.0), C) == 0.0
    # the default: the 0.999 quantile of chi-square with C - 1 degrees of freedom
    for classes in (2, 4, 10):
        default = float(chi2.ppf(0.999, classes - 1))
        for other in (None, _Filter(high=math.inf), _Filter(high=math.nan), _Filter(high=5)):
            assert exclusion_floor(other, classes) == pytest.approx(default, rel=1e-12)
    assert exclusion_floor(None, 10) == pytest.approx(27.877, abs=5e-4)


def _for_round(**kw: Any) -> ReleasePlan:
    fields: dict[str, Any] = {
        "round_id": 5,
        "min_participants": 3,
        "shape": (N, C),
        "scoring": ScoringConfig(moment_samples=400),
    }
    fields.update(kw)
    return ReleasePlan.for_round(**fields)


def test_a_rounds_plan_states_its_scoring_configuration() -> None:
    scoring = ScoringConfig(moment_samples=300, ridge=0.25, subset_fraction=0.75, min_subset=4)
    plan = _for_round(scoring=scoring, max_weight=0.5, exclude_above=9.5)
    assert (plan.round_id, plan.min_participants, plan.num_samples, plan.num_classes) == (
        5,
        3,
        N,
        C,
    )
    assert (plan.moment_samples, plan.ridge, plan.subset_fraction, plan.min_subset) == (
        300,
        0.25,
        0.75,
        4,
    )
    assert (plan.scored, plan.ranking, plan.max_weight, plan.exclude_above) == (
        True,
        True,
        0.5,
        9.5,
    )
    assert plan.evidence_rows == 0


def test_a_rounds_plan_applies_its_defaults_and_floors() -> None:
    plan = _for_round(min_participants=1, scoring=ScoringConfig(moment_samples=400, min_subset=1))
    assert (plan.min_participants, plan.min_subset) == (2, 2)
    assert plan.exclude_above == exclusion_floor(None, C)
    # the cap defaults to an equal share of the quorum: 1 / min_participants
    assert plan.scored is True and plan.max_weight == 0.5
    assert _for_round(min_participants=4).max_weight == 0.25
    assert _for_round(min_participants=4, max_weight=0.5).max_weight == 0.5
    assert _for_round(min_participants=2).min_participants == 2
    assert _for_round(min_participants=4).min_participants == 4
    assert _for_round(scoring=ScoringConfig(moment_samples=400, min_subset=3)).min_subset == 3
    # moment rows are capped by the public set's rows (N), not by the classes (C)
    assert _for_round(scoring=ScoringConfig(moment_samples=5000)).moment_samples == N
    assert _for_round(scoring=ScoringConfig(moment_samples=3)).moment_samples == 3
    assert _for_round(scoring=ScoringConfig(moment_samples=400, c_steps=1)).ranking is True
    assert _for_round(scoring=ScoringConfig(moment_samples=400, c_steps=0)).ranking is False
    assert _for_round(scored=False).scored is False


@pytest.mark.parametrize(
    ("count", "size"),
    [(4, 3), (5, 3), (9, 5), (10, 6), (11, 6), (20, 11)],
)
def test_the_subset_is_the_ceiling_of_the_fraction_of_count_plus_one(count: int, size: int) -> None:
    plan = _for_round(min_participants=2)
    assert plan.subset_size(count) == size
    assert _for_round(min_participants=2).subset_size(2) == 2


def test_the_plans_bytes_are_canonical_with_floats_as_their_repr() -> None:
    plan = _for_round(exclude_above=9.5)
    raw = plan.to_bytes()
    data = json.loads(raw)
    assert list(data) == sorted(data)
    assert not re.search(rb", |: ", raw)  # compact separators
    for name in ("subset_fraction", "ridge", "weight_floor", "max_weight", "exclude_above"):
        assert data[name] == repr(getattr(plan, name))
    assert data["ridge"] == "1e-06" and data["round_id"] == 5
    assert b'"exclude_above":"9.5","max_weight":"0.3333333333333333","min_participants":3,' in raw
    assert ReleasePlan.from_bytes(raw) == plan


def _moments(ids: tuple[str, ...]) -> ReleaseRequest:
    return ReleaseRequest(
        round_id=5,
        purpose="moments",
        contributors=ids,
        value_kind="aggregate",
        shape=(C, C),
        centre=ids,
        samples=400,
    )


def test_without_a_ranking_pass_the_moments_fix_the_roster_and_the_subset() -> None:
    plan = _for_round(scoring=ScoringConfig(moment_samples=400, c_steps=0))
    book = PlanBook(min_participants=3)
    tracker = book.install(plan)
    assert tracker.phase == "moments" and tracker.roster is None
    rng = np.random.default_rng(3)
    a = rng.normal(size=(C, C))
    moment = a @ a.T + np.eye(C)
    ids = ("d", "b", "c", "a")
    book.observe(_moments(ids), moment.reshape(-1))
    assert tracker.roster == tracker.subset == ("a", "b", "c", "d")
    assert tracker.phase == "final"
    expected = whitening(
        pooled_covariance(second_moment=moment, count=4, samples=400),
        ridge=plan.ridge,
        rows=plan.num_samples,
    )
    np.testing.assert_array_equal(tracker.whiten, expected)
    claim = tracker.whitening_claim("final")
    assert claim == tuple(tuple(float(x) for x in row) for row in expected)
    assert all(type(x) is float for row in claim or () for x in row)
    assert tracker.whitening_claim("ranking") is None


def test_a_final_whitening_needs_the_opened_covariance() -> None:
    tracker = PlanTracker(plan=_for_round())
    with pytest.raises(ScoringInvalid, match=r"no covariance was opened yet: no whitening to use$"):
        tracker.whitening_claim("final")
    assert tracker.whitening_claim("ranking") is None


def _ranking(pid: str) -> ReleaseRequest:
    return ReleaseRequest(
        round_id=5,
        purpose="score",
        contributors=(pid,),
        value_kind="score",
        shape=(1,),
        step="ranking",
        roster=IDS,
        centre=IDS,
        samples=400,
    )


def test_a_ranking_pass_keeps_its_scores_and_opens_the_lowest_subset() -> None:
    book = PlanBook(min_participants=3)
    tracker = book.install(_for_round())
    scores = {"a": 4.0, "b": 1.0, "c": 9.0, "d": 2.0, "e": 3.0}
    for pid, value in scores.items():
        assert tracker.ranking_scores == {}
        book.observe(_ranking(pid), np.array([value]))
    assert tracker.ranking_scores == scores
    assert tracker.subset == ("b", "d", "e") and tracker.phase == "moments"


def test_the_book_finds_only_installed_rounds() -> None:
    book = PlanBook(min_participants=3)
    assert book.tracker(5) is None
    tracker = book.install(_for_round())
    assert book.tracker(5) is tracker and book.tracker(6) is None
    book.observe(replace(_ranking("a"), round_id=6), np.array([1.0]))  # no plan: ignored
    assert tracker.pass_scores == {}
    book.observe(_ranking("a"), np.array([1.0]))
    assert tracker.pass_scores == {"a": 1.0}


def test_a_partys_self_check_raises_its_refusal_with_the_plans_reason() -> None:
    tracker = PlanTracker(plan=_for_round())
    tracker.require(_ranking("a"), OpeningRefused)
    moments = _moments(IDS)
    with pytest.raises(
        OpeningRefused, match=r"round 5, moments: the plan allows 'ranking' now, not 'moments'$"
    ):
        tracker.require(moments, OpeningRefused)


def test_a_scored_rounds_plan_carries_its_labeled_slice_and_its_rows() -> None:
    piece = EvidenceSlice(rows=tuple(range(0, 200, 2)), labels=(1,) * 100)
    plan = _for_round(evidence=piece)
    assert plan.evidence == piece and plan.evidence_rows == 100
    assert PlanTracker(plan=plan).rows("evidence") == 100
    assert PlanTracker(plan=plan).rows("final") == N
    assert PlanTracker(plan=plan).rows("ranking") == 400
    unscored = _for_round(evidence=piece, scored=False)
    assert unscored.evidence is None and unscored.evidence_rows == 0
