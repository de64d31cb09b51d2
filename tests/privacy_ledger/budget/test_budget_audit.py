"""Budget changes and their audit entries commit together, in the real SM2/SM3 audit log."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from crypto.sm import SM2PrivateKey
from privacy_ledger import BudgetExceeded, PrivacyLedger
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.errors import ReservationExpired

from ..helpers import event, setup_budget


@pytest.fixture(scope="module")
def signer() -> SM2PrivateKey:
    return SM2PrivateKey.generate()


def _entries(ledger: PrivacyLedger) -> list[tuple[str, dict[str, object]]]:
    from sqlalchemy.orm import Session

    with Session(ledger.engine) as session:
        rows = session.execute(select(AuditEntryRow).order_by(AuditEntryRow.entry_index))
        return [(r.event, json.loads(r.entry)) for r in rows.scalars()]


def test_every_budget_change_is_an_audit_entry(db_url: str, signer: SM2PrivateKey) -> None:
    now = [1_800_000_000.0]
    audit = AuditLog(
        signer=signer,
        origin="test.secure-fed.example/ledger",
        checkpoint_every=4,
        clock=lambda: now[0],
    )
    ledger = PrivacyLedger.from_url(db_url, audit=audit, clock=lambda: now[0])
    try:
        setup_budget(ledger, "2.5")
        ledger.commit(ledger.reserve("h1", "ct", event(steps=500), round_id="r1").id)
        with pytest.raises(BudgetExceeded):
            ledger.reserve("h1", "ct", event(steps=5000), round_id="r2")
        ledger.abort(ledger.reserve("h1", "ct", event(steps=10)).id)
        stale = ledger.reserve("h1", "ct", event(steps=600), ttl_seconds=5)
        now[0] += 10
        blocker = ledger.reserve("h1", "ct", event(steps=600))  # expires `stale` first
        with pytest.raises(ReservationExpired):
            ledger.commit(stale.id)
        ledger.commit(blocker.id)
        events = [name for name, _ in _entries(ledger)]
        assert events == [
            "budget.set",
            "budget.reserved",
            "budget.committed",
            "budget.refused",
            "budget.reserved",
            "budget.aborted",
            "budget.reserved",
            "budget.expired",
            "budget.reserved",
            "budget.refused",
            "budget.committed",
        ]
        report = verify_log(ledger.engine, public_key=signer.public_key)
        assert report.tree_size == len(events)
    finally:
        ledger.engine.dispose()


def test_refusal_entry_carries_the_figures(db_url: str, signer: SM2PrivateKey) -> None:
    audit = AuditLog(signer=signer, origin="test.secure-fed.example/ledger")
    ledger = PrivacyLedger.from_url(db_url, audit=audit)
    try:
        setup_budget(ledger, "1.5")
        with pytest.raises(BudgetExceeded) as info:
            ledger.reserve("h1", "ct", event(steps=800), round_id="r9")
        name, entry = _entries(ledger)[-1]
        assert name == "budget.refused"
        text = json.dumps(entry)
        assert str(info.value.limit) in text and "r9" in text
        assert ledger.events("h1", "ct") == []
    finally:
        ledger.engine.dispose()
