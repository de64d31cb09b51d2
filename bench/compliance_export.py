"""Compliance export benchmark: a 100,000-entry ledger exported as json, html and pdf.

Run ``python bench/compliance_export.py`` (100,000 audit entries) or ``--quick``
(20,000); prints one JSON document. The ledger (SQLite) holds ten participants
over as many rounds as fit: per round and participant a budget reservation
and its commit (the fields the privacy ledger writes), an ``upload.received``
and an ``outlier.decision``; per round a decryption request and release. The
``privacy_events`` and ``uploads`` tables get the matching rows. Each export
runs in a fresh process that reports its wall time and peak resident memory
(``ru_maxrss``); the signed bundle is then verified offline the same way.
Target: every export under 60 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crypto.sm import SM2PrivateKey, sm3_digest
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.models import (
    Budget,
    DataAsset,
    Participant,
    PrivacyEventRow,
    RoundRow,
    UploadRow,
)

PARTICIPANTS = [f"p{i:02d}" for i in range(10)]
ASSET = "records"
TARGET_SECONDS = 60.0
PER_ROUND = 4 * len(PARTICIPANTS) + 2
VERSIONS = {"opacus": "1.6.0", "torch": "2.13.0+cpu", "secure_rng": "false"}


def _sigma(p: int, r: int) -> str:
    return "1.1" if (p + r // 500) % 2 else "1.3"  # two noise multipliers per participant


def _round_entries(log: AuditLog, session: Session, r: int, now: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, p in enumerate(PARTICIPANTS):
        reservation, sigma = secrets.token_hex(16), _sigma(i, r)
        subject = f"participant:{p}/asset:{ASSET}"
        log.append(
            session,
            event="budget.reserved",
            subject=subject,
            fields={
                "reservation": reservation,
                "round": f"r{r}",
                "noise_multiplier": sigma,
                "sample_rate": "0.001",
                "steps": 20,
                "max_grad_norm": "1.0",
                "delta": "0.00001",
                "mechanism": "subsampled_gaussian",
                "sampler": "poisson",
                "versions": VERSIONS,
                "limit": "1000",
                "spent": "0",
                "reserved": "0",
                "epsilon_projected": "1",
            },
        )
        log.append(
            session,
            event="budget.committed",
            subject=subject,
            fields={
                "reservation": reservation,
                "round": f"r{r}",
                "previous_state": "reserved",
                "after_release": False,
                "over_limit": False,
            },
        )
        digest = sm3_digest(f"{p}/{r}".encode()).hex()
        log.append(
            session,
            event="upload.received",
            subject=f"participant:{p}",
            fields={
                "round_id": r,
                "participant_id": p,
                "digest": digest,
                "size": 35_000,
                "kind": "ckks",
                "shape": [359, 10],
            },
        )
        log.append(
            session,
            event="outlier.decision",
            subject=f"participant:{p}",
            fields={
                "round_id": r,
                "participant_id": p,
                "score": f"{8 + i * 0.37:.4f}",
                "smoothed": f"{8 + i * 0.35:.4f}",
                "action": "keep",
                "factor": "1.0",
                "downweight_threshold": "21.67",
                "exclude_threshold": "27.88",
            },
        )
        rows.append({"reservation": reservation, "p": p, "sigma": float(sigma), "digest": digest})
    for event in ("decryption.requested", "decryption.released"):
        log.append(
            session,
            event=event,
            subject=f"round:{r}",
            fields={
                "round_id": r,
                "purpose": "aggregate",
                "shape": [359, 10],
                "contributors": 10,
                "participant_ids": PARTICIPANTS,
                "central_dp": False,
            },
        )
    log.checkpoint(session)
    return rows


def _table_rows(session: Session, r: int, rows: list[dict[str, Any]], now: float) -> None:
    key = f"bench:{r:08d}"
    session.add(RoundRow(id=key, stage="published", state={}, created_at=now, updated_at=now))
    session.flush()
    session.execute(
        insert(PrivacyEventRow),
        [
            {
                "id": x["reservation"],
                "participant_id": x["p"],
                "asset_id": ASSET,
                "round_id": f"r{r}",
                "state": "committed",
                "accountant": "rdp",
                "noise_multiplier": x["sigma"],
                "sample_rate": 0.001,
                "steps": 20,
                "max_grad_norm": 1.0,
                "delta": 1e-5,
                "sampler": "poisson",
                "mechanism": "subsampled_gaussian",
                "versions": VERSIONS,
                "epsilon_projected": "1",
                "released_anything": False,
                "created_at": now,
                "expires_at": now + 3600,
                "resolved_at": now,
            }
            for x in rows
        ],
    )
    session.execute(
        insert(UploadRow),
        [
            {
                "round_id": key,
                "participant_id": x["p"],
                "digest": x["digest"],
                "size": 35_000,
                "kind": "ckks",
                "shape": [359, 10],
                "created_at": now,
            }
            for x in rows
        ],
    )


def _setup(session: Session, log: AuditLog, now: float) -> None:
    for p in PARTICIPANTS:
        session.add(
            Participant(
                id=p,
                institution=f"Institution {p}",
                kind="hospital",
                public_key_pem=SM2PrivateKey.generate().public_key.to_pem(),
                status="active",
                created_at=now,
            )
        )
    session.flush()
    for p in PARTICIPANTS:
        session.add(DataAsset(participant_id=p, asset_id=ASSET, description="", created_at=now))
    session.flush()
    for p in PARTICIPANTS:
        session.add(
            Budget(
                participant_id=p,
                asset_id=ASSET,
                epsilon_limit="1000",
                delta=1e-5,
                accountant="rdp",
                version=1,
                created_at=now,
                updated_at=now,
            )
        )
    session.flush()
    for p in PARTICIPANTS:
        log.append(
            session,
            event="budget.set",
            subject=f"participant:{p}/asset:{ASSET}",
            fields={
                "epsilon_limit": "1000",
                "delta": "0.00001",
                "accountant": "rdp",
                "previous_limit": None,
            },
        )


def build(path: Path, entries: int, key: SM2PrivateKey) -> int:
    """Write a ledger of about ``entries`` audit entries at ``path``; return its size."""
    engine = create_ledger_engine(f"sqlite:///{path}")
    upgrade(engine)
    clock = [1_790_000_000.0]

    def tick() -> float:
        clock[0] += 0.01
        return clock[0]

    log = AuditLog(signer=key, origin="bench.secure-fed/audit", clock=tick, checkpoint_seconds=1e9)
    with Session(engine) as session:
        _setup(session, log, tick())
        session.commit()
    rounds = max(1, (entries - len(PARTICIPANTS)) // PER_ROUND)
    for start in range(0, rounds, 25):
        with Session(engine) as session:
            for r in range(start + 1, min(start + 25, rounds) + 1):
                _table_rows(session, r, _round_entries(log, session, r, tick()), clock[0])
            session.commit()
    with Session(engine) as session:
        log.checkpoint(session, force=True)
        session.commit()
        size = log.size(session)
    engine.dispose()
    return size


def _child(fmt: str, db: Path, key_pem: Path, out: Path) -> None:
    from compliance import export_report, verify_bundle

    key = SM2PrivateKey.from_pem(key_pem.read_bytes(), passphrase=None)
    started = time.perf_counter()
    if fmt == "verify":
        report = verify_bundle(out, public_key=key.public_key, log_public_key=key.public_key)
        extra: dict[str, Any] = {"entries": report.entries}
    else:
        engine = create_ledger_engine(f"sqlite:///{db}")
        result = export_report(
            engine,
            fmt=fmt,
            out=out,
            signing_key=key,
            log_public_key=key.public_key,
            produced_by="bench",
        )
        extra = {"entries_cited": result.meta["cited"]["entries"]}
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "seconds": round(seconds, 2),
                "peak_rss_mib": round(peak, 1),
                "output_mib": round(out.stat().st_size / 2**20, 2),
                **extra,
            }
        )
    )


def _run(fmt: str, db: Path, key_pem: Path, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", fmt, str(db), str(key_pem), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 entries instead of 100,000")
    parser.add_argument("--entries", type=int, default=None)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        fmt, db, key, out = args.child
        _child(fmt, Path(db), Path(key), Path(out))
        return
    entries = args.entries or (20_000 if args.quick else 100_000)
    with tempfile.TemporaryDirectory(prefix="bench-compliance-") as tmp:
        folder, key = Path(tmp), SM2PrivateKey.generate()
        key_pem = folder / "key.pem"
        key_pem.write_bytes(key.to_pem_unencrypted_insecure())
        t0 = time.perf_counter()
        size = build(folder / "ledger.db", entries, key)
        build_s = time.perf_counter() - t0
        results = {
            fmt: _run(fmt, folder / "ledger.db", key_pem, folder / f"report.{fmt}")
            for fmt in ("json", "html", "pdf")
        }
        results["verify_bundle"] = _run(
            "verify", folder / "ledger.db", key_pem, folder / "report.json"
        )
    exports = [results[f]["seconds"] for f in ("json", "html", "pdf")]
    print(
        json.dumps(
            {
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                },
                "audit_entries": size,
                "participants": len(PARTICIPANTS),
                "build_seconds": round(build_s, 1),
                "results": results,
                "target_seconds": TARGET_SECONDS,
                "target_met": max(exports) < TARGET_SECONDS,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
