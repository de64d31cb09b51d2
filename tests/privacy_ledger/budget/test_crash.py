"""Killing a participant between reserve and commit: a restart resolves it exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from privacy_ledger import PrivacyLedger
from privacy_ledger.budget.accountant import epsilon

from ..helpers import event, setup_budget

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def killed(db_url: str) -> Iterator[tuple[str, str, float]]:
    """Run a participant that reserves, then SIGKILL it before it commits."""
    ledger = PrivacyLedger.from_url(db_url)
    setup_budget(ledger, "4")
    ledger.engine.dispose()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.privacy_ledger.budget.workers", db_url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        reservation_id, expires_at = proc.stdout.readline().split()
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    yield db_url, reservation_id, float(expires_at)


def test_restart_resumes_and_commits_once(killed: tuple[str, str, float]) -> None:
    url, reservation_id, _ = killed
    ledger = PrivacyLedger.from_url(url)
    try:
        pending = ledger.events("h1", "ct", states=["reserved"])
        assert [p.id for p in pending] == [reservation_id]
        assert pending[0].round_id == "r7"
        held = ledger.budget_status("h1", "ct")
        ledger.commit(reservation_id)
        ledger.commit(reservation_id)
        after = ledger.budget_status("h1", "ct")
        assert after.spent == held.spent + held.reserved  # the charge moved, not doubled
        assert after.reserved == 0
        assert [e.state for e in ledger.events("h1", "ct")] == ["committed"]
    finally:
        ledger.engine.dispose()


def test_restart_expires_what_was_never_released(killed: tuple[str, str, float]) -> None:
    url, reservation_id, expires_at = killed
    ledger = PrivacyLedger.from_url(url)
    try:
        assert ledger.expire_reservations(now=expires_at - 1) == 0
        assert ledger.expire_reservations(now=expires_at) == 1
        status = ledger.budget_status("h1", "ct")
        assert status.spent == 0 and status.reserved == 0
        assert [e.state for e in ledger.events("h1", "ct")] == ["expired"]
        fresh = ledger.reserve("h1", "ct", event(steps=500))
        ledger.commit(fresh.id)
        one = epsilon([event(steps=500)], delta=1e-5, accountant="rdp")
        assert ledger.epsilon_spent("h1", "ct") == one  # the killed run costs nothing
    finally:
        ledger.engine.dispose()
