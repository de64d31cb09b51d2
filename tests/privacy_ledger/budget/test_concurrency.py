"""Concurrent reservations against a budget that fits only some of them."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from privacy_ledger import BudgetExceeded, PrivacyLedger
from privacy_ledger.budget.accountant import epsilon

from ..helpers import event, setup_budget
from .workers import reserve_and_commit

CLIENTS = 16
LIMIT = "4"


def _fitting() -> int:
    n = 0
    while epsilon([event(steps=500)] * (n + 1), delta=1e-5, accountant="rdp") <= 4:
        n += 1
    return n


def _check_outcome(ledger: PrivacyLedger, outcomes: list[tuple[str, str]]) -> None:
    fitting = _fitting()
    assert 1 < fitting < CLIENTS
    kinds = [kind for kind, _ in outcomes]
    assert "error" not in kinds, outcomes
    assert kinds.count("committed") == fitting
    assert kinds.count("refused") == CLIENTS - fitting
    status = ledger.budget_status("h1", "ct")
    assert status.spent <= status.limit
    assert status.reserved == 0
    assert status.spent == epsilon([event(steps=500)] * fitting, delta=1e-5, accountant="rdp")
    assert len(ledger.events("h1", "ct", states=["committed"])) == fitting


def test_threads_never_overspend(db_url: str) -> None:
    ledger = PrivacyLedger.from_url(db_url)
    try:
        setup_budget(ledger, LIMIT)
        barrier = threading.Barrier(CLIENTS)

        def one(_: int) -> tuple[str, str]:
            barrier.wait(timeout=60)
            try:
                reservation = ledger.reserve("h1", "ct", event(steps=500))
            except BudgetExceeded as exc:
                return ("refused", str(exc.limit))
            ledger.commit(reservation.id)
            return ("committed", reservation.id)

        with ThreadPoolExecutor(CLIENTS) as pool:
            outcomes = list(pool.map(one, range(CLIENTS)))
        _check_outcome(ledger, outcomes)
    finally:
        ledger.engine.dispose()


@pytest.mark.slow
@pytest.mark.postgres
def test_processes_never_overspend(pg_url: str) -> None:
    ledger = PrivacyLedger.from_url(pg_url)
    try:
        setup_budget(ledger, LIMIT)
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(CLIENTS), ctx.Queue()
        procs = [
            ctx.Process(target=reserve_and_commit, args=(pg_url, barrier, results))
            for _ in range(CLIENTS)
        ]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=300) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        _check_outcome(ledger, outcomes)
    finally:
        ledger.engine.dispose()
