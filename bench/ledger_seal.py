"""Ledger-seal benchmark: what recording covered rows and signing ``log_state`` costs.

Run ``python -m bench.ledger_seal`` (or ``--quick``); prints one JSON document. On one
SQLite file, the same round-store workload (a round saved at each of four stages with a
~10 KB JSON state, an upload and a decryption request recorded per round) runs twice in
one process: on an engine the audit log covers (every transaction records its rows and
signs the seal) and on a second engine over another file that no log covers (the code
path before the seal). The ratio of the two is the seal's cost on writes. Then
``verify_log`` of the covered ledger is timed with and without the row comparison.
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import tempfile
import time
from pathlib import Path

from crypto.sm import SM2PrivateKey
from privacy_ledger import PrivacyLedger, RoundStore
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.db import create_ledger_engine, upgrade

STAGES = ("collect", "filter", "aggregate", "published")


def _workload(store: RoundStore, rounds: int) -> float:
    state = {"uploads": {f"p{i}": {"payload": secrets.token_hex(1250)} for i in range(4)}}
    start = time.perf_counter()
    for r in range(rounds):
        rid = f"bench:{r:08d}"
        previous = None
        for stage in STAGES:
            store.save(rid, stage=stage, state={**state, "stage": stage}, expected_stage=previous)
            previous = stage
        store.record_upload(rid, "h1", digest="ab" * 32, size=5000, kind="ckks", shape=[4, 2])
        store.record_decryption(rid, requester="ka", kind="agg", what="sum", aggregate_size=8)
    return time.perf_counter() - start


def _ledger(folder: Path, name: str, log: AuditLog | None) -> PrivacyLedger:
    engine = create_ledger_engine(f"sqlite:///{folder / name}")
    upgrade(engine)
    ledger = PrivacyLedger(engine, audit=log)
    ledger.register_participant("h1", institution="Hospital One", kind="hospital")
    return ledger


def main() -> None:
    """Run the benchmark and print its JSON report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 rounds instead of 100")
    rounds = 20 if parser.parse_args().quick else 100
    signer = SM2PrivateKey.generate()
    log = AuditLog(signer=signer, origin="bench.example/audit")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sealed, plain = _ledger(folder, "sealed.db", log), _ledger(folder, "plain.db", None)
        t_plain = _workload(RoundStore(plain.engine), rounds)
        t_sealed = _workload(RoundStore(sealed.engine), rounds)
        start = time.perf_counter()
        report = verify_log(sealed.engine, public_key=signer.public_key)
        t_verify = time.perf_counter() - start
        start = time.perf_counter()
        verify_log(sealed.engine, public_key=signer.public_key, compare_rows=False)
        t_verify_log_only = time.perf_counter() - start
        sealed.engine.dispose()
        plain.engine.dispose()
    transactions = rounds * (len(STAGES) + 2)
    print(
        json.dumps(
            {
                "benchmark": "ledger_seal",
                "python": platform.python_version(),
                "rounds": rounds,
                "write_transactions": transactions,
                "uncovered_seconds": round(t_plain, 3),
                "sealed_seconds": round(t_sealed, 3),
                "sealed_over_uncovered": round(t_sealed / t_plain, 2),
                "seal_ms_per_transaction": round((t_sealed - t_plain) / transactions * 1000, 2),
                "row_records": report.row_records,
                "rows_checked": report.rows_checked,
                "verify_seconds": round(t_verify, 3),
                "verify_without_rows_seconds": round(t_verify_log_only, 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
