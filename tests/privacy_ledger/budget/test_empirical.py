"""Empirical privacy audits round-trip through the real signed audit log of a SQLite ledger."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger import AuditLog, PrivacyLedger, verify_log
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.budget.empirical import (
    NOT_AUDITED,
    EmpiricalAudit,
    EmpiricalAuditInvalid,
    EmpiricalAuditUnrecordable,
    accounted_epsilon_over,
    audit_from_fields,
    audited_budgets,
    empirical_audits,
    latest_empirical_audits,
    record_empirical_audit,
)
from privacy_ledger.errors import BudgetNotSet, LogTampered

from ..helpers import event, setup_budget


def _audit(**over: Any) -> EmpiricalAudit:
    base: dict[str, Any] = {
        "participant": "h1",
        "asset": "ct",
        "rounds_from": "r1",
        "rounds_to": "r2",
        "canaries": 1000,
        "guesses": 200,
        "correct": 130,
        "score": "loss",
        "confidence": Decimal("0.95"),
        "delta": Decimal("0.00001"),
        "epsilon_lower_bound": Decimal("0.412"),
        "epsilon_accounted": Decimal("2.1"),
        "method": "steinke-nasr-jagielski-2023",
    }
    base.update(over)
    return EmpiricalAudit(**base)


@pytest.fixture
def signer() -> SM2PrivateKey:
    return SM2PrivateKey.generate()


@pytest.fixture
def ledger(tmp_path: Path, signer: SM2PrivateKey) -> Any:
    audit = AuditLog(signer=signer, origin="test.secure-fed.example/ledger", checkpoint_every=1)
    led = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}", audit=audit)
    setup_budget(led, "8")
    for rid in ("r1", "r2", "r3"):
        led.commit(led.reserve("h1", "ct", event(steps=300), round_id=rid).id)
    yield led
    led.engine.dispose()


def test_round_trip_verifies_and_reads_back(ledger: PrivacyLedger, signer: SM2PrivateKey) -> None:
    first = _audit()
    second = _audit(rounds_to="r3", epsilon_lower_bound=Decimal("0.5"))
    i1 = record_empirical_audit(ledger, first)
    i2 = record_empirical_audit(ledger, second)
    assert i2 > i1
    report = verify_log(ledger.engine, public_key=signer.public_key)
    assert report.tree_size == i2 + 1
    found = empirical_audits(ledger)
    assert [r.audit for r in found] == [first, second]
    assert [r.index for r in found] == [i1, i2]
    assert latest_empirical_audits(ledger)[("h1", "ct")].audit == second
    assert empirical_audits(ledger, participant="h2") == []
    with Session(ledger.engine) as session:
        row = session.execute(
            select(AuditEntryRow).where(AuditEntryRow.entry_index == i1)
        ).scalar_one()
    entry = json.loads(row.entry)
    assert row.event == "budget.audited" and row.subject == "participant:h1"
    assert entry["fields"]["epsilon_lower_bound"] == "0.412"  # a string, never a float
    assert entry["fields"]["confidence"] == "0.95"
    assert first.label == "empirical lower bound (95%, 1000 canaries)"


def test_an_altered_audit_entry_fails_verification(
    ledger: PrivacyLedger, signer: SM2PrivateKey
) -> None:
    index = record_empirical_audit(ledger, _audit())
    with Session(ledger.engine) as session, session.begin():
        row = session.get(AuditEntryRow, index)
        assert row is not None
        forged = row.entry.replace(
            b'"epsilon_lower_bound":"0.412"', b'"epsilon_lower_bound":"0.001"'
        )
        assert forged != row.entry
        session.execute(
            update(AuditEntryRow).where(AuditEntryRow.entry_index == index).values(entry=forged)
        )
    with pytest.raises(LogTampered):
        verify_log(ledger.engine, public_key=signer.public_key)


def test_accounted_epsilon_over_the_audited_rounds(ledger: PrivacyLedger) -> None:
    whole = ledger.budget_status("h1", "ct")
    assert accounted_epsilon_over(ledger, "h1", "ct", "r1", "r3") == whole.spent
    assert (
        accounted_epsilon_over(ledger, "h1", "ct", "r1", "r2") == whole.per_round[1].epsilon_after
    )
    assert accounted_epsilon_over(ledger, "h1", "ct", "r2", "r2") < whole.per_round[1].epsilon_after
    with pytest.raises(EmpiricalAuditInvalid):
        accounted_epsilon_over(ledger, "h1", "ct", "r3", "r1")


@pytest.mark.parametrize(
    "over",
    [
        {"epsilon_lower_bound": 0.4},  # a float
        {"epsilon_lower_bound": Decimal("-0.1")},
        {"epsilon_lower_bound": Decimal("NaN")},
        {"epsilon_lower_bound": Decimal("Infinity")},
        {"epsilon_accounted": "2.1"},  # a string in the dataclass
        {"confidence": Decimal("1")},
        {"confidence": Decimal("0")},
        {"delta": Decimal("1")},
        {"canaries": 0},
        {"canaries": True},
        {"guesses": 1001},
        {"correct": 201},
        {"correct": -1},
        {"participant": "h 1"},
        {"rounds_to": ""},
        {"score": ""},
        {"method": "x" * 65},
    ],
)
def test_malformed_audit_is_refused(over: dict[str, Any]) -> None:
    with pytest.raises(EmpiricalAuditInvalid) as raised:
        _audit(**over)
    assert raised.value.code == "LEDGER_EMPIRICAL_AUDIT_INVALID"


def test_malformed_fields_are_refused() -> None:
    good = _audit().fields()
    assert audit_from_fields(good) == _audit()
    for bad in (
        {k: v for k, v in good.items() if k != "canaries"},
        {**good, "extra": "1"},
        {**good, "epsilon_lower_bound": 0},
        {**good, "delta": "0.1.2"},
    ):
        with pytest.raises(EmpiricalAuditInvalid):
            audit_from_fields(bad)


def test_recording_refuses_unknown_rounds_budgets_and_unsigned_ledgers(
    ledger: PrivacyLedger, tmp_path: Path
) -> None:
    with pytest.raises(EmpiricalAuditInvalid):
        record_empirical_audit(ledger, _audit(rounds_to="r9"))
    with pytest.raises(BudgetNotSet):
        record_empirical_audit(ledger, _audit(asset="mri"))
    with pytest.raises(EmpiricalAuditInvalid):
        record_empirical_audit(ledger, dataclasses.asdict(_audit()))  # type: ignore[arg-type]
    assert empirical_audits(ledger) == []
    bare = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'bare.db'}")
    try:
        setup_budget(bare)
        bare.commit(bare.reserve("h1", "ct", event(), round_id="r1").id)
        with pytest.raises(EmpiricalAuditUnrecordable):
            record_empirical_audit(bare, _audit(rounds_to="r1"))
    finally:
        bare.engine.dispose()


def test_audited_budgets_show_the_bound_beside_the_accounted_epsilon(
    ledger: PrivacyLedger,
) -> None:
    ledger.register_asset("h1", "mri", description="MRI")
    ledger.set_budget("h1", "mri", epsilon="3", delta=1e-5)
    over = accounted_epsilon_over(ledger, "h1", "ct", "r1", "r2")
    record_empirical_audit(ledger, _audit(epsilon_lower_bound=over + Decimal("0.5")))
    below = record_empirical_audit(ledger, _audit())
    rows = {(b.participant, b.asset): b for b in audited_budgets(ledger)}
    ct, mri = rows[("h1", "ct")], rows[("h1", "mri")]
    assert ct.recorded is not None and ct.recorded.index == below and ct.audits == 2
    assert ct.epsilon_accounted == over and ct.exceeds is False
    assert ct.exceeding == (below - 1,) and ct.unmatched == ()
    assert ct.text == "0.412 (empirical lower bound (95%, 1000 canaries))"
    assert ct.epsilon_spent == ledger.epsilon_spent("h1", "ct")
    assert mri.recorded is None and mri.text == NOT_AUDITED == mri.bound and mri.exceeds is None
