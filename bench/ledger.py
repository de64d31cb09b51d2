"""Privacy-ledger benchmark: reservation round trips (PostgreSQL) plus the audit-log figures.

Run ``python bench/ledger.py`` or ``python bench/ledger.py --quick``; prints one
JSON document. ``--skip-audit`` runs only the reservation part.

* :func:`reservation_latency`: one client, then 16 concurrent clients
  (threads, one ``PrivacyLedger`` and connection pool shared, as in a service),
  each doing reserve -> commit against PostgreSQL with the whole-history RDP
  accounting and an SM2/SM3 :class:`~privacy_ledger.audit.log.AuditLog` in the same
  transaction. Reported: median and p99 of reserve alone and of the full round
  trip, in milliseconds, and round trips per second. Two 16-client cases: every
  client on its own budget (the common case) and all on one budget (worst
  case: they serialize on its row lock).
* ``audit``: appends per second and verification time, from
  ``bench/ledger_audit.py`` (:func:`ledger_audit.audit_bench`).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crypto.sm import SM2PrivateKey
from privacy_ledger import (
    AuditLog,
    MechanismEvent,
    PrivacyLedger,
    create_ledger_engine,
)

PG_BASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
EVENT = MechanismEvent(
    noise_multiplier=1.1,
    sample_rate=0.01,
    steps=10,
    delta=1e-5,
    max_grad_norm=1.0,
    versions={"opacus": "1.6.0"},
)


@contextmanager
def pg_schema() -> Iterator[str]:
    """Yield a URL for a fresh PostgreSQL schema, dropped afterwards."""
    schema = "bench_ledger_" + secrets.token_hex(4)
    admin = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{PG_BASE_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
    }


def _round_trips(
    ledger: PrivacyLedger, participant: str, n: int, barrier: threading.Barrier | None
) -> tuple[list[float], list[float], float]:
    ledger.commit(ledger.reserve(participant, "a", EVENT).id)  # warm-up (caches, pool)
    if barrier is not None:
        barrier.wait()
    reserve_s, total_s = [], []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        reservation = ledger.reserve(participant, "a", EVENT)
        t1 = time.perf_counter()
        ledger.commit(reservation.id)
        t2 = time.perf_counter()
        reserve_s.append(t1 - t0)
        total_s.append(t2 - t0)
    return reserve_s, total_s, time.perf_counter() - start


def _setup(ledger: PrivacyLedger, participants: list[str]) -> None:
    for pid in participants:
        ledger.register_participant(pid, institution=f"Bench {pid}", kind="other")
        ledger.register_asset(pid, "a")
        ledger.set_budget(pid, "a", epsilon="1000000", delta=1e-5)


def run_clients(ledger: PrivacyLedger, clients: int, ops: int, *, shared: bool) -> dict[str, Any]:
    """Run ``clients`` concurrent reserve->commit loops of ``ops`` each; summarize latencies."""
    tag = secrets.token_hex(3)
    participants = [f"c{tag}" if shared else f"c{tag}-{i}" for i in range(clients)]
    _setup(ledger, sorted(set(participants)))
    barrier = threading.Barrier(clients) if clients > 1 else None
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda p: _round_trips(ledger, p, ops, barrier), participants))
    wall = max(w for _, _, w in results)  # measured after the warm-up and the barrier
    reserve = [s for r, _, _ in results for s in r]
    total = [s for _, t, _ in results for s in t]
    return {
        "clients": clients,
        "ops": len(total),
        "same_budget": shared,
        "reserve": _percentiles(reserve),
        "round_trip": _percentiles(total),
        "round_trips_per_s": round(len(total) / wall, 1),
    }


def reservation_latency(quick: bool) -> dict[str, Any]:
    """Reservation round-trip latency on PostgreSQL with 1 and 16 concurrent clients."""
    ops_single, ops_each = (60, 8) if quick else (300, 40)
    try:
        context = pg_schema()
        url = context.__enter__()
    except Exception as exc:
        return {"skipped": f"PostgreSQL unavailable: {type(exc).__name__}"}
    try:
        audit = AuditLog(signer=SM2PrivateKey.generate(), origin="bench.secure-fed/ledger")
        ledger = PrivacyLedger.from_url(url, audit=audit)
        ledger.engine.dispose()
        ledger = PrivacyLedger(create_ledger_engine(url, pool_size=17), audit=audit)
        try:
            return {
                "backend": "postgresql",
                "one_client": run_clients(ledger, 1, ops_single, shared=False),
                "sixteen_clients_own_budgets": run_clients(ledger, 16, ops_each, shared=False),
                "sixteen_clients_one_budget": run_clients(ledger, 16, ops_each, shared=True),
            }
        finally:
            ledger.engine.dispose()
    finally:
        context.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations")
    parser.add_argument("--skip-audit", action="store_true", help="reservations only")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "bench": "ledger",
        "quick": args.quick,
        "reservations": reservation_latency(args.quick),
    }
    if not args.skip_audit:
        from ledger_audit import audit_bench

        result["audit"] = audit_bench(args.quick)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
