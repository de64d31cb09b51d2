"""The release plan's ``evidence`` step: one scalar of the plan's own slice per roster member, once.

The evidence of correctness (secure_fed.secure.scoring.evidence) is opened after
the final scores and before the publication, one scalar per member of the scored
roster, with the mask of exactly the labeled slice the plan names; anything else
is refused.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from secure_fed.errors import ModeSetupInvalid
from secure_fed.secure.release_plan import MIN_EVIDENCE_ROWS, PlanBook, PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.evidence import EvidenceSlice, plain_evidence
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from tests.secure_fed.secure.helpers import population
from tests.secure_fed.secure.test_release_plan import IDS, PLAN, C, N, _publication, _through_scores

ROWS = 100
LABELS = tuple(int(y) for y in np.random.default_rng(0).integers(0, C, size=ROWS))
SLICE = EvidenceSlice(rows=tuple(range(0, 2 * ROWS, 2)), labels=LABELS)
EVIDENCE_PLAN = replace(PLAN, evidence=SLICE)


def _slice(rows: int, *, start: int = 0) -> EvidenceSlice:
    return EvidenceSlice(rows=tuple(range(start, start + rows)), labels=(0,) * rows)


def _evidence(pid: str, **changes: object) -> ReleaseRequest:
    fields: dict[str, object] = {
        "round_id": 3,
        "purpose": "score",
        "contributors": (pid,),
        "value_kind": "score",
        "shape": (1,),
        "step": "evidence",
        "roster": IDS,
        "samples": ROWS,
        "evidence": SLICE,
    }
    fields.update(changes)
    return ReleaseRequest(**fields)  # type: ignore[arg-type]


@pytest.fixture
def scored() -> tuple[PlanTracker, dict[str, np.ndarray]]:
    preds = dict(zip(IDS, population(5, N, C, seed=2).values(), strict=True))
    tracker = PlanTracker(plan=EVIDENCE_PLAN, enrolled=frozenset(IDS))
    _through_scores(tracker, preds)
    return tracker, preds


def test_evidence_comes_between_the_final_scores_and_the_publication(
    scored: tuple[PlanTracker, dict[str, np.ndarray]],
) -> None:
    tracker, preds = scored
    assert tracker.phase == "evidence"
    weights = (0.2,) * 5
    assert "'evidence' now, not 'publication'" in str(tracker.reason(_publication(IDS, weights)))
    values = plain_evidence(preds, SLICE.mask((N, C)))
    for pid in IDS:
        assert tracker.reason(_evidence(pid)) is None
        tracker.record(_evidence(pid), np.array([values[pid]]))
        if pid != IDS[-1]:  # opened once; after the last, the plan has moved on
            assert "one unreleased member" in str(tracker.reason(_evidence(pid)))
    assert "not 'evidence'" in str(tracker.reason(_evidence("a")))
    assert tracker.evidence == pytest.approx(values) and tracker.phase == "publication"
    assert tracker.reason(_publication(IDS, weights)) is None


ONE_ROW = EvidenceSlice(rows=(SLICE.rows[0],), labels=(SLICE.labels[0],))


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"roster": IDS[:4]}, "roster must be the scored roster"),
        ({"centre": IDS}, "no centre and no whitening"),
        ({"whitening": ((1.0,),)}, "no centre and no whitening"),
        ({"samples": N}, f"fixes {ROWS} rows"),
        ({"contributors": ("a", "b")}, "one unreleased member"),
        ({"contributors": ("x",)}, "one unreleased member"),
        ({"evidence": None}, "not the plan's labeled slice"),
        ({"evidence": ONE_ROW, "samples": 1}, "not the plan's labeled slice"),
        ({"evidence": ONE_ROW}, "not the plan's labeled slice"),
        ({"evidence": replace(SLICE, labels=(1,) * ROWS)}, "not the plan's labeled slice"),
        ({"evidence": _slice(ROWS)}, "not the plan's labeled slice"),
    ],
)
def test_evidence_refusals(
    scored: tuple[PlanTracker, dict[str, np.ndarray]], changes: dict[str, object], fragment: str
) -> None:
    assert fragment in str(scored[0].reason(_evidence("a", **changes)))


def test_no_evidence_step_without_a_slice_and_none_before_the_final_scores() -> None:
    tracker = PlanTracker(plan=PLAN, enrolled=frozenset(IDS))
    assert "allows 'ranking' now, not 'evidence'" in str(tracker.reason(_evidence("a")))
    preds = dict(zip(IDS, population(5, N, C, seed=3).values(), strict=True))
    _through_scores(tracker, preds)
    assert tracker.phase == "publication"
    assert "not 'evidence'" in str(tracker.reason(_evidence("a")))


def test_gatekeepers_refuse_a_slice_of_a_few_rows() -> None:
    book = PlanBook(min_participants=3)
    with pytest.raises(ModeSetupInvalid, match="evidence must average over more rows"):
        book.install(replace(PLAN, evidence=_slice(MIN_EVIDENCE_ROWS - 1)))
    assert book.install(replace(PLAN, evidence=_slice(MIN_EVIDENCE_ROWS))).plan.evidence_rows == 64


@pytest.mark.parametrize(
    ("piece", "fragment"),
    [
        (_slice(2, start=N - 1), "evidence is out of range"),  # row N is outside the public set
        (EvidenceSlice(rows=(1, 1), labels=(0, 0)), "evidence is out of range"),
        (EvidenceSlice(rows=(1, 2), labels=(0, C)), "evidence is out of range"),
        (EvidenceSlice(rows=(1.0, 2), labels=(0, 1)), "EvidenceSlice of integers"),  # type: ignore[arg-type]
        (EvidenceSlice(rows=(True, 2), labels=(0, 1)), "EvidenceSlice of integers"),
    ],
)
def test_a_slice_outside_the_uploads_is_refused(piece: EvidenceSlice, fragment: str) -> None:
    with pytest.raises(ModeSetupInvalid, match=fragment):
        replace(PLAN, evidence=piece)


def test_the_plan_round_trips_its_slice_and_unscored_plans_have_none() -> None:
    assert ReleasePlan.from_bytes(EVIDENCE_PLAN.to_bytes()) == EVIDENCE_PLAN
    assert EVIDENCE_PLAN.evidence_rows == ROWS and PLAN.evidence_rows == 0
    unscored = ReleasePlan.for_round(
        round_id=1,
        min_participants=3,
        shape=(N, C),
        scoring=ScoringConfig(moment_samples=400),
        scored=False,
        evidence=SLICE,
    )
    assert unscored.evidence is None and unscored.evidence_rows == 0


@pytest.mark.parametrize(
    "evidence",
    ['{"rows": [1, 2]}', "[1, 2]", '{"rows": [1, 2], "labels": [0]}', '{"rows": 3, "labels": 1}'],
)
def test_a_malformed_slice_in_plan_bytes_is_refused(evidence: str) -> None:
    raw = EVIDENCE_PLAN.to_bytes().decode()
    start = raw.index('"evidence":') + len('"evidence":')
    end = raw.index("}", start) + 1
    with pytest.raises(ModeSetupInvalid, match="release plan refused"):
        ReleasePlan.from_bytes((raw[:start] + evidence + raw[end:]).encode())
