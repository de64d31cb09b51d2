"""Checklist item: no empirical lower bound exceeds the ledger's accounted epsilon."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from decimal import Decimal

import pytest
from sqlalchemy import Engine

from compliance.checklist import ChecklistEntry, run_checklist
from compliance.checklist_config import ChecklistConfig
from compliance.checklist_empirical import ITEM_ID
from privacy_ledger import AuditLog, PrivacyLedger
from privacy_ledger.budget.empirical import accounted_epsilon_over, record_empirical_audit
from tests.compliance.builder import ASSET, PARTICIPANTS, Built
from tests.empirical_helpers import record_audit


@pytest.fixture
def ledger(ledger_copy: Engine, built: Built) -> Iterator[PrivacyLedger]:
    log = AuditLog(signer=built.log_key, origin="test.example/audit")
    led = PrivacyLedger.from_url(str(ledger_copy.url), audit=log)
    yield led
    led.engine.dispose()


def _item(ledger: PrivacyLedger) -> ChecklistEntry:
    result = run_checklist(ChecklistConfig(), ledger.engine)
    return next(e for e in result.entries if e.id == ITEM_ID)


def test_no_audit_is_manual_not_a_failure(ledger: PrivacyLedger) -> None:
    item = _item(ledger)
    assert item.status == "manual" and item.reason.startswith("not audited")
    assert item.required


def test_bounds_below_the_accounted_epsilon_pass(ledger: PrivacyLedger) -> None:
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r3"))
    item = _item(ledger)
    assert item.status == "pass", item.reason
    assert f"not audited: {PARTICIPANTS[1]}/{ASSET}" in item.reason


def test_a_bound_above_the_accounted_epsilon_fails_naming_the_participant(
    ledger: PrivacyLedger,
) -> None:
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r3"))
    record_audit(ledger, PARTICIPANTS[1], ASSET, ("r1", "r2"), above=True)
    item = _item(ledger)
    assert item.status == "fail"
    assert f"participant {PARTICIPANTS[1]}" in item.reason
    assert f"participant {PARTICIPANTS[0]}" not in item.reason
    assert "differential privacy was not applied as charged" in item.reason
    assert not run_checklist(ChecklistConfig(), ledger.engine).ok


def test_the_ledger_epsilon_is_compared_not_the_auditors_copy(ledger: PrivacyLedger) -> None:
    honest = record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r1"))
    accounted = accounted_epsilon_over(ledger, PARTICIPANTS[0], ASSET, "r1", "r1")
    claimed = dataclasses.replace(
        honest,
        epsilon_lower_bound=accounted + Decimal("0.25"),
        epsilon_accounted=accounted + Decimal("5"),  # the auditor's copy would hide it
    )
    record_empirical_audit(ledger, claimed)
    item = _item(ledger)
    assert item.status == "fail"
    assert f"exceeds the accounted epsilon {accounted}" in item.reason


def test_the_newest_audit_of_a_span_is_judged_not_an_earlier_one(ledger: PrivacyLedger) -> None:
    """An early per-round entry above its epsilon, superseded by the span's newest, passes.

    Each entry is its own 95% statement; failing on the largest of a span's entries
    would raise the false-alarm rate with every round (the module docstring).
    """
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r1"), above=True)
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r2"))
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r3"))
    item = _item(ledger)
    assert item.status == "pass", item.reason
    assert item.reason.startswith("1 empirical audits of 1 budgets (2 earlier entries"), item.reason


def test_a_newest_audit_above_its_epsilon_fails_whatever_came_before(
    ledger: PrivacyLedger,
) -> None:
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r1"))
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r2"))
    record_audit(ledger, PARTICIPANTS[0], ASSET, ("r1", "r3"), above=True)
    record_audit(ledger, PARTICIPANTS[1], ASSET, ("r1", "r2"), above=True)
    record_audit(ledger, PARTICIPANTS[1], ASSET, ("r2", "r3"))  # another span: judged apart
    item = _item(ledger)
    assert item.status == "fail"
    assert f"participant {PARTICIPANTS[0]} (asset {ASSET}): " in item.reason, item.reason
    assert "rounds r1 to r3) exceeds" in item.reason, item.reason
    assert f"participant {PARTICIPANTS[1]} (asset {ASSET}): " in item.reason, item.reason
    assert "rounds r1 to r2) exceeds" in item.reason and "rounds r2 to r3" not in item.reason
