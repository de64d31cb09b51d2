"""Check, reserve, commit: the budget service on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

import pytest
from sqlalchemy.orm import Session

from privacy_ledger import BudgetExceeded, PrivacyLedger
from privacy_ledger.budget.accountant import epsilon
from privacy_ledger.errors import (
    AccountantNotAllowed,
    AssetUnknown,
    BudgetNotSet,
    LedgerParameterInvalid,
    ParticipantConflict,
    ParticipantSuspended,
    ParticipantUnknown,
    ReservationExpired,
    ReservationNotActive,
    ReservationUnknown,
)

from ..helpers import event, setup_budget


class RecordingSink:
    """Audit sink that checks it is called inside the ledger's open transaction."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.entries: list[tuple[str, str, dict[str, object]]] = []
        self.fail_on = fail_on

    def append(
        self,
        session: Session,
        *,
        event: str,
        subject: str,
        fields: Mapping[str, object],
        sensitive: Mapping[str, object] | None = None,
    ) -> int:
        assert session.in_transaction()
        assert not any(isinstance(v, float) for v in fields.values())
        if event == self.fail_on:
            raise RuntimeError("audit storage failed")
        self.entries.append((event, subject, dict(fields)))
        return len(self.entries)


def test_reserve_commit_spends_whole_history_epsilon(ledger: PrivacyLedger) -> None:
    setup_budget(ledger, "10")
    r1 = ledger.reserve("h1", "ct", event(), round_id="r1")
    status = ledger.budget_status("h1", "ct")
    assert status.spent == 0 and status.reserved > 0 and status.active_reservations == 1
    ledger.commit(r1.id)
    r2 = ledger.reserve("h1", "ct", event(), round_id="r2")
    ledger.commit(r2.id)
    both = epsilon([event(), event()], delta=1e-5, accountant="rdp")
    assert ledger.epsilon_spent("h1", "ct") == both
    assert both < 2 * epsilon([event()], delta=1e-5, accountant="rdp")
    status = ledger.budget_status("h1", "ct")
    assert status.limit == Decimal(10) and status.reserved == 0
    assert status.remaining == Decimal(10) - both
    assert [rid for rid, _ in status.per_round] == ["r1", "r2"]
    assert status.per_round[-1].epsilon_after == both
    assert r2.epsilon_projected == both


def test_refusal_carries_figures_and_records_nothing(ledger: PrivacyLedger) -> None:
    setup_budget(ledger, "2")
    ledger.commit(ledger.reserve("h1", "ct", event(steps=500)).id)
    held = ledger.reserve("h1", "ct", event(steps=200))
    before = ledger.budget_status("h1", "ct")
    with pytest.raises(BudgetExceeded, match="exceeds limit 2") as info:
        ledger.reserve("h1", "ct", event(steps=5000))
    err = info.value
    assert err.code == "LEDGER_BUDGET_EXCEEDED"
    assert (err.limit, err.spent, err.reserved) == (Decimal(2), before.spent, before.reserved)
    assert err.requested > 0
    assert err.spent + err.reserved + err.requested > err.limit
    assert ledger.budget_status("h1", "ct") == before
    assert [r.id for r in ledger.events("h1", "ct", states=["reserved"])] == [held.id]


def test_commit_is_idempotent(ledger: PrivacyLedger) -> None:
    setup_budget(ledger)
    r = ledger.reserve("h1", "ct", event())
    ledger.commit(r.id)
    spent = ledger.epsilon_spent("h1", "ct")
    ledger.commit(r.id)
    assert ledger.epsilon_spent("h1", "ct") == spent
    assert [e.state for e in ledger.events("h1", "ct")] == ["committed"]


def test_abort_releases_unless_something_was_released(ledger: PrivacyLedger) -> None:
    setup_budget(ledger)
    r = ledger.reserve("h1", "ct", event())
    ledger.abort(r.id)
    ledger.abort(r.id)  # idempotent
    assert ledger.budget_status("h1", "ct").reserved == 0
    assert ledger.epsilon_spent("h1", "ct") == 0
    with pytest.raises(ReservationNotActive, match="aborted"):
        ledger.commit(r.id)
    leaked = ledger.reserve("h1", "ct", event())
    ledger.abort(leaked.id, released_anything=True)
    assert ledger.epsilon_spent("h1", "ct") > 0
    assert {e.id: e.state for e in ledger.events("h1", "ct")}[leaked.id] == "committed"
    with pytest.raises(ReservationNotActive, match="never refunded"):
        ledger.abort(leaked.id)


def test_expiry_releases_and_commit_revives_only_if_it_fits(db_url: str) -> None:
    now = [1000.0]
    ledger = PrivacyLedger.from_url(db_url, clock=lambda: now[0])
    try:
        setup_budget(ledger, "2")
        r = ledger.reserve("h1", "ct", event(steps=500), ttl_seconds=60)
        assert ledger.expire_reservations() == 0
        now[0] += 61
        assert ledger.expire_reservations() == 1
        assert ledger.expire_reservations() == 0
        assert ledger.budget_status("h1", "ct").reserved == 0
        ledger.commit(r.id)  # still fits: revived as committed
        assert ledger.events("h1", "ct")[0].state == "committed"
        late = ledger.reserve("h1", "ct", event(steps=300), ttl_seconds=10)
        now[0] += 11
        ledger.commit(ledger.reserve("h1", "ct", event(steps=300)).id)  # expires `late`
        with pytest.raises(ReservationExpired, match="release nothing"):
            ledger.commit(late.id)
        assert ledger.epsilon_spent("h1", "ct") <= 2
    finally:
        ledger.engine.dispose()


def test_audit_events_share_the_transaction(db_url: str) -> None:
    sink = RecordingSink()
    ledger = PrivacyLedger.from_url(db_url, audit=sink)
    try:
        setup_budget(ledger, "2")
        r = ledger.reserve("h1", "ct", event(steps=100), round_id="r1")
        ledger.commit(r.id)
        with pytest.raises(BudgetExceeded):
            ledger.reserve("h1", "ct", event(steps=10_000))
        ledger.abort(ledger.reserve("h1", "ct", event(sigma=5.0, steps=1)).id)
        ledger.set_participant_status("h1", "suspended")
        with pytest.raises(ParticipantSuspended):
            ledger.reserve("h1", "ct", event(sigma=5.0, steps=1))
        names = [name for name, _, _ in sink.entries]
        assert names == [
            "budget.set",
            "budget.reserved",
            "budget.committed",
            "budget.refused",
            "budget.reserved",
            "budget.aborted",
            "budget.refused",
        ]
        assert sink.entries[-1][2]["reason"] == "participant suspended"
        assert all(subject == "participant:h1/asset:ct" for _, subject, _ in sink.entries)
        reserved = sink.entries[1][2]
        assert reserved["steps"] == 100 and reserved["noise_multiplier"] == Decimal("1.0")
        assert reserved["round"] == "r1" and reserved["versions"] == {"opacus": "1.6.0"}
    finally:
        ledger.engine.dispose()


def test_failed_audit_write_rolls_back_the_reservation(db_url: str) -> None:
    ledger = PrivacyLedger.from_url(db_url, audit=RecordingSink(fail_on="budget.reserved"))
    try:
        setup_budget(ledger)
        with pytest.raises(RuntimeError, match="audit storage failed"):
            ledger.reserve("h1", "ct", event())
        assert ledger.events("h1", "ct") == []
        assert ledger.budget_status("h1", "ct").reserved == 0
    finally:
        ledger.engine.dispose()


def test_budget_set_validation(ledger: PrivacyLedger) -> None:
    setup_budget(ledger)
    with pytest.raises(LedgerParameterInvalid, match="epsilon: pass an exact decimal"):
        ledger.set_budget("h1", "ct", epsilon=1.5, delta=1e-5)  # type: ignore[arg-type]
    for bad in ("0", "-1", "NaN", "Infinity", "abc"):
        with pytest.raises(LedgerParameterInvalid, match="epsilon"):
            ledger.set_budget("h1", "ct", epsilon=bad, delta=1e-5)
    with pytest.raises(LedgerParameterInvalid, match="delta"):
        ledger.set_budget("h1", "ct", epsilon="1", delta=1.0)
    with pytest.raises(AccountantNotAllowed, match="allowed: prv, rdp"):
        ledger.set_budget("h1", "ct", epsilon="1", delta=1e-5, accountant="gdp")
    with pytest.raises(AssetUnknown, match="no asset 'xray'"):
        ledger.set_budget("h1", "xray", epsilon="1", delta=1e-5)
    with pytest.raises(ParticipantUnknown, match="'nobody'"):
        ledger.set_budget("nobody", "ct", epsilon="1", delta=1e-5)
    ledger.set_budget("h1", "ct", epsilon=Decimal("3.25"), delta=1e-6, accountant="prv")
    status = ledger.budget_status("h1", "ct")
    assert (status.limit, status.delta, status.accountant) == (Decimal("3.25"), 1e-6, "prv")


def test_participants_and_reservation_errors(ledger: PrivacyLedger) -> None:
    setup_budget(ledger)
    ledger.register_participant("h1", institution="Hospital One", kind="hospital")  # no-op
    with pytest.raises(ParticipantConflict, match="other attributes"):
        ledger.register_participant("h1", institution="Other", kind="bank")
    with pytest.raises(LedgerParameterInvalid, match="kind"):
        ledger.register_participant("b1", institution="Bank", kind="insurer")
    with pytest.raises(LedgerParameterInvalid, match="participant_id"):
        ledger.register_participant("bad id!", institution="Bank", kind="bank")
    with pytest.raises(LedgerParameterInvalid, match="public_key_pem"):
        ledger.register_participant(
            "b1", institution="Bank", kind="bank", public_key_pem=b"x" * 5000
        )
    with pytest.raises(BudgetNotSet, match="no budget set"):
        ledger.reserve("h1", "other", event())
    with pytest.raises(LedgerParameterInvalid, match="ttl_seconds"):
        ledger.reserve("h1", "ct", event(), ttl_seconds=0)
    with pytest.raises(LedgerParameterInvalid, match="event"):
        ledger.reserve("h1", "ct", {"steps": 1})  # type: ignore[arg-type]
    with pytest.raises(ReservationUnknown, match="does not exist"):
        ledger.commit("0" * 32)
    ledger.set_participant_status("h1", "suspended")
    with pytest.raises(ParticipantSuspended, match="suspended"):
        ledger.reserve("h1", "ct", event())
    ledger.set_participant_status("h1", "active")
    ledger.reserve("h1", "ct", event())


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("noise_multiplier", 0.0, "noise_multiplier"),
        ("sample_rate", 1.5, "sample_rate"),
        ("steps", 0, "steps"),
        ("delta", 1.0, "delta"),
        ("max_grad_norm", -1.0, "max_grad_norm"),
        ("mechanism", "laplace", "mechanism"),
        ("sampler", "shuffle", "sampler"),
    ],
)
def test_mechanism_event_errors_are_typed(field: str, value: object, fragment: str) -> None:
    from privacy_ledger import MechanismEvent
    from privacy_ledger.errors import MechanismInvalid

    params: dict[str, object] = {
        "noise_multiplier": 1.0,
        "sample_rate": 0.01,
        "steps": 10,
        "delta": 1e-5,
        "max_grad_norm": 1.0,
        field: value,
    }
    with pytest.raises(MechanismInvalid, match=fragment) as info:
        MechanismEvent(**params)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert info.value.code == "LEDGER_MECHANISM_INVALID"


def test_open_without_create_refuses_an_unmigrated_database(db_url: str) -> None:
    from privacy_ledger.errors import SchemaOutdated

    with pytest.raises(SchemaOutdated, match="create=True"):
        PrivacyLedger.from_url(db_url, create=False)
    PrivacyLedger.from_url(db_url).engine.dispose()
    PrivacyLedger.from_url(db_url, create=False).engine.dispose()


def test_release_after_expiry_is_charged_even_over_the_limit(db_url: str) -> None:
    now = [1000.0]
    ledger = PrivacyLedger.from_url(db_url, clock=lambda: now[0])
    try:
        setup_budget(ledger, "2")
        late = ledger.reserve("h1", "ct", event(steps=600), ttl_seconds=5)
        now[0] += 10
        ledger.commit(ledger.reserve("h1", "ct", event(steps=600)).id)
        ledger.abort(late.id, released_anything=True)  # something did leave: record it
        status = ledger.budget_status("h1", "ct")
        assert status.spent == epsilon([event(steps=600)] * 2, delta=1e-5, accountant="rdp")
        assert status.spent > status.limit and status.remaining == 0
        with pytest.raises(BudgetExceeded):
            ledger.reserve("h1", "ct", event(sigma=50.0, steps=1))
    finally:
        ledger.engine.dispose()
