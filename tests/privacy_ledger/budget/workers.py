"""Process entry points for the concurrency and crash tests (importable under spawn)."""

from __future__ import annotations

import sys
import time
from typing import Any

from privacy_ledger import BudgetExceeded, PrivacyLedger

from ..helpers import event


def reserve_and_commit(url: str, barrier: Any, results: Any) -> None:
    """Wait for every worker, then reserve 500 steps and commit; report the outcome."""
    ledger = PrivacyLedger.from_url(url, create=False)
    try:
        ledger.budget_status("h1", "ct")  # warm up imports and the connection
        barrier.wait(timeout=120)
        try:
            reservation = ledger.reserve("h1", "ct", event(steps=500))
        except BudgetExceeded as exc:
            results.put(("refused", str(exc.limit)))
            return
        ledger.commit(reservation.id)
        results.put(("committed", reservation.id))
    except Exception as exc:  # reported to the parent, which fails the test
        results.put(("error", repr(exc)))
    finally:
        ledger.engine.dispose()


def reserve_then_hang(url: str) -> None:
    """Reserve, announce the reservation id on stdout, then wait to be killed."""
    ledger = PrivacyLedger.from_url(url, create=False)
    reservation = ledger.reserve("h1", "ct", event(steps=500), round_id="r7", ttl_seconds=30)
    sys.stdout.write(f"{reservation.id} {reservation.expires_at!r}\n")
    sys.stdout.flush()
    time.sleep(600)


if __name__ == "__main__":
    reserve_then_hang(sys.argv[1])
