"""Guards of the release plan, one test per mutant that survived the plan's own tests.

Each test drives :class:`~secure_fed.secure.release_plan.ReleasePlan`,
:class:`~secure_fed.secure.release_plan.PlanTracker` or
:class:`~secure_fed.secure.release_plan.PlanBook` at a boundary (a value exactly at a
limit, a claim a hair off the derived whitening) or reads a refusal's exact text
(docs/benchmarks.md, "Mutation testing", third run).
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.release_plan import (
    CAP_TOLERANCE,
    WEIGHT_FLOOR,
    PlanBook,
    PlanTracker,
    ReleasePlan,
)
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.mahalanobis import ScoringConfig

N, C = 600, 4
IDS = ("a", "b", "c", "d", "e")
PLAN = ReleasePlan.for_round(
    round_id=3, min_participants=3, shape=(N, C), scoring=ScoringConfig(moment_samples=400)
)
BASE: dict[str, Any] = {
    "round_id": 3,
    "min_participants": 2,
    "num_samples": N,
    "num_classes": C,
    "moment_samples": 400,
}


def _score(pid: str, step: str, **kw: Any) -> ReleaseRequest:
    fields: dict[str, Any] = {
        "roster": IDS,
        "centre": IDS,
        "samples": 400 if step == "ranking" else N,
    }
    fields.update(kw)
    return ReleaseRequest(
        round_id=3,
        purpose="score",
        contributors=(pid,),
        value_kind="score",
        shape=(1,),
        step=step,
        **fields,
    )


def _publication(ids: tuple[str, ...], weights: tuple[float, ...] | None) -> ReleaseRequest:
    return ReleaseRequest(
        round_id=3,
        purpose="aggregate",
        contributors=ids,
        value_kind="aggregate",
        shape=(N, C),
        weights=weights,
    )


def _claim(w: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(x) for x in row) for row in w)


# -- ReleasePlan.__post_init__ ------------------------------------------------------


@pytest.mark.parametrize("name", list(BASE))
@pytest.mark.parametrize("value", [-1, "3", True, 2.0])
def test_integer_fields_are_non_negative_integers(name: str, value: object) -> None:
    with pytest.raises(
        ModeSetupInvalid,
        match=rf"^\[MODE_SETUP_INVALID\] {name} must be a non-negative integer, "
        rf"got {re.escape(repr(value))}$",
    ):
        ReleasePlan(**{**BASE, name: value})


def test_round_zero_is_a_round() -> None:
    assert ReleasePlan(**{**BASE, "round_id": 0}).round_id == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("min_participants", 1),
        ("num_classes", 1),
        ("moment_samples", 0),
        ("moment_samples", N + 1),
        ("subset_fraction", 0.0),
        ("subset_fraction", 1.5),
        ("min_subset", 1),
        ("min_subset", 2.5),
        ("ridge", 1.0),
        ("ridge", 1.5),
        ("weight_floor", 0.0),
        ("weight_floor", 1.5),
        ("max_weight", 1.5),
        ("exclude_above", float("inf")),
    ],
)
def test_each_out_of_range_field_is_named(name: str, value: object) -> None:
    with pytest.raises(
        ModeSetupInvalid,
        match=rf"^\[MODE_SETUP_INVALID\] {name} is out of range: {re.escape(repr(value))}$",
    ):
        ReleasePlan(**{**BASE, name: value})


def test_the_inclusive_limits_are_accepted() -> None:
    plan = ReleasePlan(
        **{**BASE, "num_classes": 2, "moment_samples": N, "evidence": _rows(N, last=1)},
        subset_fraction=1.0,
        ridge=0.0,
        weight_floor=1.0,
        max_weight=1.0,
    )
    assert (plan.num_classes, plan.moment_samples, plan.evidence_rows) == (2, N, N)
    assert (plan.subset_fraction, plan.ridge, plan.weight_floor) == (1.0, 0.0, 1.0)
    assert ReleasePlan(**BASE, weight_floor=0.25, max_weight=0.25).max_weight == 0.25


# -- PlanBook.install, _bounds_reason, __call__ --------------------------------------


def test_a_plan_at_the_gatekeepers_row_minimums_is_installed() -> None:
    book = PlanBook(min_participants=2)
    plan = replace(PLAN, moment_samples=256, evidence=_rows(64))
    assert book.install(plan).plan == plan
    with pytest.raises(
        ModeSetupInvalid,
        match=r"^\[MODE_SETUP_INVALID\] release plan of round 4 refused: 1 evidence rows: "
        r"the evidence must average over more rows$",
    ):
        book.install(replace(PLAN, round_id=4, evidence=_rows(1)))


def test_the_installed_tracker_knows_the_gatekeepers_roster(
    caplog: pytest.LogCaptureFixture,
) -> None:
    book = PlanBook(min_participants=2, enrolled=frozenset(IDS[:3]))
    with caplog.at_level(logging.INFO, logger="secure_fed.secure.release_plan"):
        tracker = book.install(PLAN)
    assert tracker.enrolled == frozenset(IDS[:3])
    assert caplog.messages == ["release plan installed for round 3"]


def test_the_book_answers_with_the_rounds_plan() -> None:
    book = PlanBook(min_participants=2)
    book.install(PLAN)
    assert book(_score("a", "ranking")) is None
    assert book(_score("a", "final")) == "the plan allows 'ranking' now, not 'final'"
    other = replace(_publication(IDS, None), round_id=4)
    assert book(other) == "no release plan was fixed for round 4"


# -- PlanTracker refusals: exact reasons and boundaries ------------------------------


def test_means_and_unnamed_rosters_are_refused_by_name() -> None:
    tracker = PlanTracker(plan=PLAN)
    mean = replace(_publication(IDS, None), purpose="mean")
    assert tracker.reason(mean) == "the release plan opens no means (they stay encrypted / shared)"
    assert tracker.reason(_score("a", "ranking", roster=None)) == (
        "a scoring pass must name its roster"
    )
    tracker.roster = IDS
    assert tracker.reason(_score("a", "ranking", roster=IDS[:4])) == (
        "roster differs from the plan's"
    )


def test_a_roster_of_exactly_min_participants_is_scored() -> None:
    tracker = PlanTracker(plan=PLAN, enrolled=frozenset(IDS))
    three = IDS[:3]
    assert tracker.reason(_score("a", "ranking", roster=three, centre=three)) is None


def test_ranking_accepts_the_identity_and_refuses_another_whitening() -> None:
    tracker = PlanTracker(plan=PLAN)
    assert tracker.reason(_score("a", "ranking", whitening=_claim(np.eye(C)))) is None
    twice = _claim(2 * np.eye(C))
    assert tracker.reason(_score("a", "ranking", whitening=twice)) == "ranking scores use W = I"


def _final_tracker() -> tuple[PlanTracker, np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.normal(size=(C, C))
    w = a @ a.T + C * np.eye(C)
    tracker = PlanTracker(plan=PLAN)
    tracker.roster = tracker.subset = IDS
    tracker.phase, tracker.whiten = "final", w
    return tracker, w


def test_a_final_score_uses_exactly_the_derived_whitening() -> None:
    tracker, w = _final_tracker()
    assert tracker.reason(_score("a", "final", whitening=_claim(w))) is None
    differs = "the whitening differs from the one the opened covariance gives"
    for off in (w * (1 + 1e-7), w + 5e-9):
        assert tracker.reason(_score("a", "final", whitening=_claim(off))) == differs
    assert tracker.reason(_score("a", "final")) == "a final score must name the whitening it uses"
    assert tracker.reason(_score("a", "final", samples=400, whitening=_claim(w))) == (
        "final: the plan fixes 600 rows, not 400"
    )


def _rows(count: int, *, last: int = 0) -> EvidenceSlice:
    """A slice of the first ``count`` public rows, each labelled ``last``."""
    return EvidenceSlice(rows=tuple(range(count)), labels=(last,) * count)


def _evidence_tracker() -> PlanTracker:
    tracker = PlanTracker(plan=replace(PLAN, evidence=_rows(64)))
    tracker.roster, tracker.phase = IDS, "evidence"
    return tracker


def test_evidence_refusals_are_named() -> None:
    tracker = _evidence_tracker()
    ok = replace(_score("a", "evidence", centre=None, samples=64), evidence=_rows(64))
    assert tracker.reason(ok) is None
    assert tracker.reason(replace(ok, evidence=_rows(64, last=1))) == (
        "evidence: the mask is not the plan's labeled slice"
    )
    assert tracker.reason(replace(ok, roster=IDS[:4])) == (
        "evidence: the roster must be the scored roster"
    )
    assert tracker.reason(replace(ok, centre=IDS)) == (
        "evidence: a public linear function has no centre and no whitening"
    )
    assert tracker.reason(replace(ok, contributors=("x",))) == (
        "evidence: one unreleased member of the roster at a time"
    )


def _unscored(**kw: Any) -> PlanTracker:
    kw.setdefault("max_weight", 0.5)  # 1 / min_participants
    return PlanTracker(
        plan=replace(PLAN, scored=False, min_participants=2, **kw),
        enrolled=frozenset(IDS[:3]),
    )


def test_an_unscored_publication_is_over_enrolled_participants() -> None:
    tracker = _unscored()
    assert tracker.reason(_publication(IDS[:3], (0.25, 0.25, 0.5))) is None
    assert tracker.reason(_publication(IDS[:2], (0.5, 0.5))) is None
    assert tracker.reason(_publication(("a", "x"), (0.5, 0.5))) == (
        "participants ['x'] are not enrolled"
    )


def test_a_score_exactly_at_the_floor_must_be_published() -> None:
    tracker = PlanTracker(plan=replace(PLAN, min_participants=2))
    tracker.roster, tracker.phase = IDS, "publication"
    tracker.final_scores = {p: 0.0 for p in IDS} | {"e": PLAN.exclude_above}
    assert tracker.reason(_publication(IDS[:4], (0.25,) * 4)) == (
        "['e'] scored below the exclusion floor and must be published"
    )


def test_weights_exactly_at_their_limits_are_accepted() -> None:
    tracker = _unscored(max_weight=0.5)
    cap = tracker.plan.max_weight * (1.0 + CAP_TOLERANCE)
    assert tracker.reason(_publication(("a", "b"), (cap, 1.0 - cap))) is None
    tracker = _unscored(max_weight=1.0)
    assert tracker.reason(_publication(("a", "b"), (WEIGHT_FLOOR, 1.0 - WEIGHT_FLOOR))) is None
    slack = (0.5, 0.5 + 2 * WEIGHT_FLOOR)  # sum - 1 is exactly count * floor
    assert tracker.reason(_publication(("a", "b"), slack)) is None


def test_weight_refusals_are_named() -> None:
    tracker = _unscored()
    assert tracker.reason(_publication(("a", "b"), (1.0,))) == (
        "the publication must state one public weight per participant"
    )
    assert tracker.reason(_publication(("a", "b"), (0.0, 1.0))) == (
        f"weights [0.0] are below the codec's resolution {WEIGHT_FLOOR!r} "
        "(a weight that rounds to zero is refused, not an exclusion)"
    )
