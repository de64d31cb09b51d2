"""Audit-log benchmark: appends per second (SQLite, PostgreSQL) and full verification time.

Run ``python bench/ledger_audit.py`` (verification of 100,000 entries) or
``--quick`` (20,000); prints one JSON document. ``bench/ledger.py`` includes
these figures under ``"audit"`` (see :func:`audit_bench`). Heads are signed
with the default policy (every 256 entries or 5 s). Appends are measured two
ways: batched (1,000 appends per transaction) and one transaction per append
(each commit waits for the disk: SQLite's default rollback journal fsyncs).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crypto.sm import SM4GCM, SM2PrivateKey
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.db import create_ledger_engine, upgrade

PG_BASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TARGET_APPENDS_PER_S = 2000
TARGET_VERIFY_100K_S = 30.0


def _log(key: SM2PrivateKey) -> AuditLog:
    return AuditLog(
        signer=key, origin="bench.secure-fed/audit", evidence_key=SM4GCM(SM4GCM.generate_key())
    )


def _append(log: AuditLog, session: Session, i: int) -> None:
    log.append(
        session,
        event="budget.reserved",
        subject=f"participant:p{i % 16}",
        fields={
            "reservation": f"{i:032x}",
            "epsilon_projected": f"1.{i % 997:03d}",
            "noise_multiplier": "1.1",
            "sample_rate": "0.01",
            "steps": 500,
        },
        sensitive={"reason": "scheduled round"} if i % 10 == 0 else None,
    )
    log.checkpoint(session)


def appends(engine: Engine, log: AuditLog, n: int, *, per_txn: int, start: int = 0) -> float:
    """Append ``n`` entries, ``per_txn`` per transaction; return appends per second."""
    t0 = time.perf_counter()
    done = start
    while done < start + n:
        with Session(engine) as session:
            for i in range(done, min(done + per_txn, start + n)):
                _append(log, session, i)
            session.commit()
        done = min(done + per_txn, start + n)
    return n / (time.perf_counter() - t0)


def _measure(engine: Engine, batched_n: int, single_n: int) -> dict[str, float]:
    log = _log(SM2PrivateKey.generate())
    return {
        "batched_1000_per_txn_appends_per_s": round(
            appends(engine, log, batched_n, per_txn=1000), 1
        ),
        "one_txn_per_append_appends_per_s": round(
            appends(engine, log, single_n, per_txn=1, start=batched_n), 1
        ),
    }


def sqlite_appends(workdir: Path, quick: bool) -> dict[str, float]:
    engine = create_ledger_engine(f"sqlite:///{workdir / 'appends.db'}")
    upgrade(engine)
    try:
        return _measure(engine, 5000 if quick else 20_000, 100 if quick else 300)
    finally:
        engine.dispose()


def postgres_appends(quick: bool) -> dict[str, Any]:
    schema = "bench_audit_" + secrets.token_hex(4)
    admin = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:
        admin.dispose()
        return {"skipped": f"PostgreSQL unavailable: {type(exc).__name__}"}
    engine = create_ledger_engine(f"{PG_BASE_URL}?options=-csearch_path%3D{schema}")
    try:
        upgrade(engine)
        return _measure(engine, 5000 if quick else 20_000, 300 if quick else 1000)
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        admin.dispose()


def verify_time(workdir: Path, n: int) -> dict[str, Any]:
    engine = create_ledger_engine(f"sqlite:///{workdir / 'verify.db'}")
    upgrade(engine)
    key = SM2PrivateKey.generate()
    try:
        build_rate = appends(engine, _log(key), n, per_txn=5000)
        t0 = time.perf_counter()
        report = verify_log(engine, public_key=key.public_key)
        seconds = time.perf_counter() - t0
    finally:
        engine.dispose()
    return {
        "entries": report.tree_size,
        "heads_checked": report.heads_checked,
        "verify_seconds": round(seconds, 2),
        "build_appends_per_s": round(build_rate, 1),
    }


def audit_bench(quick: bool) -> dict[str, Any]:
    """Run every audit-log measurement; return a JSON-ready dict with target checks."""
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        workdir = Path(tmp)
        sqlite = sqlite_appends(workdir, quick)
        postgres = postgres_appends(quick)
        n = 20_000 if quick else 100_000
        verify = verify_time(workdir, n)
    projected_100k = verify["verify_seconds"] * 100_000 / verify["entries"]
    return {
        "sqlite_appends": sqlite,
        "postgres_appends": postgres,
        "verify_sqlite": verify,
        "targets": {
            "sqlite_batched_appends_per_s>=2000": sqlite["batched_1000_per_txn_appends_per_s"]
            >= TARGET_APPENDS_PER_S,
            "verify_100k_under_30s_projected": projected_100k < TARGET_VERIFY_100K_S,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20,000-entry verification")
    args = parser.parse_args()
    print(
        json.dumps(
            {"bench": "ledger_audit", "quick": args.quick, "audit": audit_bench(args.quick)},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
