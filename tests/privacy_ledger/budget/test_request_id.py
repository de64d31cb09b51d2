"""A caller-chosen request id makes ``reserve`` safe to repeat after a lost answer."""

from __future__ import annotations

import pytest

from privacy_ledger import MechanismEvent, PrivacyLedger
from privacy_ledger.budget.event_rows import request_reservation_id
from privacy_ledger.errors import (
    BudgetExceeded,
    LedgerParameterInvalid,
    ParticipantSuspended,
    ReservationConflict,
)

EVENT = MechanismEvent(
    noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5, max_grad_norm=1.0
)
RID = "a" * 24


@pytest.fixture
def funded(ledger: PrivacyLedger) -> PrivacyLedger:
    for pid in ("h1", "h2"):
        ledger.register_participant(pid, institution=pid, kind="hospital")
        ledger.register_asset(pid, "records")
        ledger.set_budget(pid, "records", epsilon="8", delta=1e-5)
    return ledger


def test_a_repeated_request_returns_the_same_reservation_and_holds_once(
    funded: PrivacyLedger,
) -> None:
    first = funded.reserve("h1", "records", EVENT, round_id="r1", request_id=RID)
    again = funded.reserve("h1", "records", EVENT, round_id="r1", request_id=RID)
    assert again == first
    assert len(funded.events("h1", "records")) == 1
    funded.commit(first.id)
    replayed = funded.reserve("h1", "records", EVENT, round_id="r1", request_id=RID)
    assert replayed.id == first.id and replayed.state == "committed"
    assert len(funded.events("h1", "records")) == 1


def test_the_same_request_id_on_another_budget_is_another_reservation(
    funded: PrivacyLedger,
) -> None:
    mine = funded.reserve("h1", "records", EVENT, request_id=RID)
    theirs = funded.reserve("h2", "records", EVENT, request_id=RID)
    assert mine.id != theirs.id
    assert mine.id == request_reservation_id("h1", "records", RID)


@pytest.mark.parametrize(
    "change",
    [
        {"round_id": "r2"},
        {
            "event": MechanismEvent(
                noise_multiplier=1.2, sample_rate=0.01, steps=100, delta=1e-5, max_grad_norm=1.0
            )
        },
    ],
)
def test_a_request_id_reused_for_another_plan_is_a_conflict(
    funded: PrivacyLedger, change: dict[str, object]
) -> None:
    funded.reserve("h1", "records", EVENT, round_id="r1", request_id=RID)
    args: dict[str, object] = {"event": EVENT, "round_id": "r1", **change}
    with pytest.raises(ReservationConflict, match="request_id"):
        funded.reserve("h1", "records", request_id=RID, **args)  # type: ignore[arg-type]
    assert len(funded.events("h1", "records")) == 1


@pytest.mark.parametrize("bad", ["short", "x" * 129, "has space in it!!", "é" * 20, 12345])
def test_a_malformed_request_id_is_refused(funded: PrivacyLedger, bad: object) -> None:
    with pytest.raises(LedgerParameterInvalid, match="request_id"):
        funded.reserve("h1", "records", EVENT, request_id=bad)  # type: ignore[arg-type]
    assert funded.events("h1", "records") == []


def test_a_refused_request_holds_nothing_and_may_be_retried(funded: PrivacyLedger) -> None:
    funded.set_budget("h1", "records", epsilon="0.01", delta=1e-5)
    for _ in range(2):
        with pytest.raises(BudgetExceeded):
            funded.reserve("h1", "records", EVENT, request_id=RID)
    assert funded.events("h1", "records") == []


def test_a_replay_is_answered_even_after_suspension(funded: PrivacyLedger) -> None:
    first = funded.reserve("h1", "records", EVENT, request_id=RID)
    funded.set_participant_status("h1", "suspended")
    assert funded.reserve("h1", "records", EVENT, request_id=RID).id == first.id
    with pytest.raises(ParticipantSuspended):
        funded.reserve("h1", "records", EVENT, request_id="b" * 24)
