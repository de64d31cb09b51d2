"""What an upload notice costs: the participant's signature, the gatekeeper's check and write.

Prints one JSON document. For ``--notices`` participants (fresh SM2 keys), in one run:
the time to sign a notice (participant side), to parse and verify it
(:func:`secure_fed.secure.protocol.upload_notice.parse_notice`, the gatekeeper's check
before anything is recorded) and to journal it
(:meth:`secure_fed.secure.plan_journal.PlanJournal.record_notice`, one synchronous
SQLite transaction, before the acknowledgement), per notice, and the notice's size.
Run ``python -m bench.upload_notices [--notices 100]`` (``bench/crypto.py`` shadows the
``crypto`` package when run as a script). A gatekeeper serves notices one at a time, so
``gatekeeper_ms * participants`` is the time a round's notices occupy it.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from crypto.sm import SM2PrivateKey
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.protocol.upload_notice import parse_notice, sign_notice


def main() -> None:
    """Measure and print the JSON document."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notices", type=int, default=100)
    n = parser.parse_args().notices
    keys = {f"p{i:04d}": SM2PrivateKey.generate() for i in range(n)}
    public = {p: k.public_key for p, k in keys.items()}
    t0 = time.perf_counter()
    notices = [
        sign_notice(k, round_id=1, participant_id=p, party="helper", upload_sm3="ab" * 32)
        for p, k in keys.items()
    ]
    t1 = time.perf_counter()
    parsed = [parse_notice(raw, party="helper", keys=public) for raw in notices]
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        journal = PlanJournal(Path(tmp) / "plans.db")
        for raw, notice in zip(notices, parsed, strict=True):
            journal.record_notice(notice.round_id, notice.participant_id, raw)
        t3 = time.perf_counter()
        journal.close()
    verify, write = 1e3 * (t2 - t1) / n, 1e3 * (t3 - t2) / n
    print(
        json.dumps(
            {
                "notices": n,
                "notice_bytes": max(len(raw) for raw in notices),
                "sign_ms": round(1e3 * (t1 - t0) / n, 2),
                "verify_ms": round(verify, 2),
                "journal_write_ms": round(write, 2),
                "gatekeeper_ms": round(verify + write, 2),
                "journal_write_over_verify": round(write / verify, 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
