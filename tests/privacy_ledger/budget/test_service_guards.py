"""Guards of the budget service that mutation testing found unchecked.

Each test names what ``scripts/mutation budget`` changed and every test stayed
green: a reservation id that is not a string, the exact refusal messages, the
audit fields of a resolution, idempotent commit and abort (no second event, no
version bump), the abort's ``released_anything`` flag, and the expiry
deadline (inclusive, the caller's ``now``, counted over every budget).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger import BudgetExceeded, PrivacyLedger
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.budget.accountant import epsilon
from privacy_ledger.errors import LedgerParameterInvalid, ParticipantSuspended
from privacy_ledger.models import Budget, PrivacyEventRow

from ..helpers import event, setup_budget

T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def signer() -> SM2PrivateKey:
    return SM2PrivateKey.generate()


@pytest.fixture
def clocked(db_url: str, signer: SM2PrivateKey) -> Iterator[tuple[PrivacyLedger, list[float]]]:
    now = [T0]
    audit = AuditLog(signer=signer, origin="test.secure-fed.example/ledger", clock=lambda: now[0])
    ledger = PrivacyLedger.from_url(db_url, audit=audit, clock=lambda: now[0])
    setup_budget(ledger, "8")
    try:
        yield ledger, now
    finally:
        ledger.engine.dispose()


def _entries(ledger: PrivacyLedger, name: str) -> list[dict[str, object]]:
    with Session(ledger.engine) as session:
        rows = session.execute(select(AuditEntryRow).order_by(AuditEntryRow.entry_index))
        return [json.loads(r.entry) for r in rows.scalars() if r.event == name]


def _version(ledger: PrivacyLedger) -> int:
    with Session(ledger.engine) as session:
        return int(session.execute(select(Budget.version)).scalar_one())


def _row(ledger: PrivacyLedger, reservation_id: str) -> PrivacyEventRow:
    with Session(ledger.engine) as session:
        return session.execute(
            select(PrivacyEventRow).where(PrivacyEventRow.id == reservation_id)
        ).scalar_one()


@pytest.mark.parametrize("bad", [123, None, "", b"abc"])
def test_a_reservation_id_must_be_a_non_empty_string(
    clocked: tuple[PrivacyLedger, list[float]], bad: object
) -> None:
    ledger, _ = clocked
    for resolve in (ledger.commit, ledger.abort):
        with pytest.raises(
            LedgerParameterInvalid, match="reservation_id: must be a non-empty string"
        ):
            resolve(bad)  # type: ignore[arg-type]


def test_released_anything_must_be_a_bool(clocked: tuple[PrivacyLedger, list[float]]) -> None:
    ledger, _ = clocked
    held = ledger.reserve("h1", "ct", event(steps=50))
    with pytest.raises(LedgerParameterInvalid, match="released_anything: must be a bool"):
        ledger.abort(held.id, released_anything="yes")  # type: ignore[arg-type]
    assert _row(ledger, held.id).state == "reserved"  # nothing changed


def test_abort_is_recorded_once_with_its_fields(clocked: tuple[PrivacyLedger, list[float]]) -> None:
    ledger, now = clocked
    held = ledger.reserve("h1", "ct", event(steps=50), round_id="r3")
    before = _version(ledger)
    now[0] += 7
    ledger.abort(held.id)
    row = _row(ledger, held.id)
    assert (row.state, row.resolved_at, row.released_anything) == ("aborted", T0 + 7, False)
    assert _version(ledger) == before + 1
    ledger.abort(held.id)  # idempotent: no second event, no version bump
    assert _version(ledger) == before + 1
    (aborted,) = _entries(ledger, "budget.aborted")
    details = json.dumps(aborted)
    for field in ('"reservation"', '"previous_state"', '"round"', held.id, '"reserved"', '"r3"'):
        assert field in details, (field, aborted)


def test_commit_twice_charges_and_records_once(
    clocked: tuple[PrivacyLedger, list[float]],
) -> None:
    ledger, now = clocked
    held = ledger.reserve("h1", "ct", event(steps=50), round_id="r4")
    before = _version(ledger)
    now[0] += 3
    ledger.commit(held.id)
    ledger.commit(held.id)
    assert _version(ledger) == before + 1
    row = _row(ledger, held.id)
    assert (row.state, row.resolved_at) == ("committed", T0 + 3)
    (committed,) = _entries(ledger, "budget.committed")
    assert held.id in json.dumps(committed) and '"previous_state"' in json.dumps(committed)


def test_expiry_uses_the_callers_now_and_an_inclusive_deadline(
    clocked: tuple[PrivacyLedger, list[float]],
) -> None:
    ledger, _ = clocked
    setup_budget(ledger, "8", pid="h2")
    first = ledger.reserve("h1", "ct", event(steps=50), ttl_seconds=60)
    second = ledger.reserve("h2", "ct", event(steps=50), ttl_seconds=60)
    kept = ledger.reserve("h1", "ct", event(steps=50), ttl_seconds=60)
    ledger.commit(kept.id)  # committed rows never expire
    assert ledger.expire_reservations(now=T0 + 59) == 0  # the clock (T0) is not used
    assert _row(ledger, first.id).state == "reserved"
    # at the deadline itself, both budgets' reservations expire, and both are counted
    assert ledger.expire_reservations(now=T0 + 60) == 2
    assert {_row(ledger, r.id).state for r in (first, second)} == {"expired"}
    assert _row(ledger, first.id).resolved_at == T0 + 60
    assert _row(ledger, kept.id).state == "committed"


def test_a_bad_round_id_is_named(clocked: tuple[PrivacyLedger, list[float]]) -> None:
    ledger, _ = clocked
    with pytest.raises(LedgerParameterInvalid, match=r"^\[\w+\] round_id: 'round 1!' must be"):
        ledger.reserve("h1", "ct", event(steps=50), round_id="round 1!")
    assert ledger.events("h1", "ct") == []


def test_an_expiry_is_logged_with_its_reservation(
    clocked: tuple[PrivacyLedger, list[float]], caplog: pytest.LogCaptureFixture
) -> None:
    ledger, _ = clocked
    held = ledger.reserve("h1", "ct", event(steps=50), ttl_seconds=60)
    with caplog.at_level("INFO", logger="privacy_ledger.budget.service"):
        ledger.expire_reservations(now=T0 + 60)
    assert f"reservation {held.id} expired (nothing released)" in caplog.messages


def test_a_refusal_is_audited_with_the_budget_and_logged(
    clocked: tuple[PrivacyLedger, list[float]], caplog: pytest.LogCaptureFixture
) -> None:
    ledger, _ = clocked
    ledger.commit(ledger.reserve("h1", "ct", event(steps=500), round_id="r1").id)
    with (
        caplog.at_level("INFO", logger="privacy_ledger.budget.service"),
        pytest.raises(BudgetExceeded) as info,
    ):
        ledger.reserve("h1", "ct", event(steps=50_000), round_id="r2")
    (refused,) = _entries(ledger, "budget.refused")
    text = json.dumps(refused)
    for key in ('"limit"', '"spent"', '"reserved"', '"epsilon_projected"', '"round"', '"r2"'):
        assert key in text, (key, refused)
    assert f"refused: {info.value.message}" in caplog.messages


def test_a_suspended_participant_is_refused_and_audited(
    clocked: tuple[PrivacyLedger, list[float]],
) -> None:
    ledger, _ = clocked
    ledger.set_participant_status("h1", "suspended")
    with pytest.raises(ParticipantSuspended, match="'h1' is suspended"):
        ledger.reserve("h1", "ct", event(steps=50), round_id="r5")
    (refused,) = _entries(ledger, "budget.refused")
    text = json.dumps(refused)
    assert '"round"' in text and '"r5"' in text and "participant suspended" in text
    assert ledger.events("h1", "ct") == []


def test_a_reservation_may_use_the_budget_exactly(
    clocked: tuple[PrivacyLedger, list[float]],
) -> None:
    ledger, _ = clocked
    planned = event(steps=500)
    exact = epsilon([planned], delta=1e-5, accountant="rdp")
    setup_budget(ledger, str(exact), pid="h3")
    before = _version_of(ledger, "h3")
    ledger.commit(ledger.reserve("h3", "ct", planned).id)  # projected == limit: allowed
    assert ledger.budget_status("h3", "ct").spent == exact
    assert _version_of(ledger, "h3") == before + 2  # the reservation and its commit
    with pytest.raises(BudgetExceeded):
        ledger.reserve("h3", "ct", event(steps=1))


def _version_of(ledger: PrivacyLedger, pid: str) -> int:
    with Session(ledger.engine) as session:
        query = select(Budget.version).where(Budget.participant_id == pid)
        return int(session.execute(query).scalar_one())


def test_a_budget_change_records_the_previous_limit_of_that_asset(
    clocked: tuple[PrivacyLedger, list[float]],
) -> None:
    ledger, _ = clocked
    ledger.register_asset("h1", "mri", description="MRI")
    ledger.set_budget("h1", "mri", epsilon="2", delta=1e-5)  # a first budget of another asset
    ledger.set_budget("h1", "ct", epsilon="6", delta=1e-5)
    sets = [json.dumps(e) for e in _entries(ledger, "budget.set")]
    assert '"previous_limit":null' in sets[1].replace(" ", "")  # mri had none
    assert '"previous_limit":"8"' in sets[2].replace(" ", "")  # ct had 8 (the fixture's)
    with pytest.raises(LedgerParameterInvalid, match=r"delta: must be a float in \(0, 1\)"):
        ledger.set_budget("h1", "ct", epsilon="6", delta=0.0)


def test_a_reservation_is_audited_with_its_id(
    clocked: tuple[PrivacyLedger, list[float]],
) -> None:
    ledger, _ = clocked
    held = ledger.reserve("h1", "ct", event(steps=50))
    (reserved,) = _entries(ledger, "budget.reserved")
    assert f'"reservation": "{held.id}"' in json.dumps(reserved)


def test_a_budget_is_stored_in_plain_digits_and_versioned(
    clocked: tuple[PrivacyLedger, list[float]],
) -> None:
    ledger, _ = clocked
    ledger.register_asset("h1", "xr", description="X-ray")
    ledger.set_budget("h1", "xr", epsilon="1e1", delta=1e-5, accountant="prv")
    with Session(ledger.engine) as session:
        row = session.execute(select(Budget).where(Budget.asset_id == "xr")).scalar_one()
        assert (row.epsilon_limit, row.delta, row.accountant, row.version) == (
            "10",
            1e-5,
            "prv",
            1,
        )
    ledger.set_budget("h1", "xr", epsilon="12", delta=1e-5)
    with Session(ledger.engine) as session:
        assert (
            session.execute(select(Budget.version).where(Budget.asset_id == "xr")).scalar_one() == 2
        )
    text = json.dumps(_entries(ledger, "budget.set")[-1]).replace(" ", "")
    for fragment in (
        '"epsilon_limit":"12"',
        '"delta":',
        '"accountant":"rdp"',
        '"previous_limit":"10"',
    ):
        assert fragment in text, (fragment, text)
