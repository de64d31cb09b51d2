from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.errors import UnknownEventType
from secure_fed.errors import OpeningRefused
from secure_fed.secure.audit import LedgerAuditSink, MemoryAuditSink, canonical_fields
from secure_fed.secure.release_policy import ReleasePolicy, ReleaseRequest


def _ask(ids: tuple[str, ...]) -> ReleaseRequest:
    return ReleaseRequest(
        round_id=4,
        purpose="mean",
        contributors=ids,
        value_kind="aggregate",
        shape=(5, 3),
        weights=tuple(1 / len(ids) for _ in ids),
    )


def test_gatekeeper_events_land_in_the_signed_log(tmp_path: Path) -> None:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    upgrade(engine)
    signer = SM2PrivateKey.generate()
    log = AuditLog(signer=signer, origin="test.example/audit", checkpoint_every=1)
    sink = LedgerAuditSink(engine=engine, log=log)
    policy = ReleasePolicy(party="helper", min_participants=3, refusal=OpeningRefused, audit=sink)
    with pytest.raises(OpeningRefused, match="at least 3"):
        policy.check(_ask(("a", "b")))
    policy.released(_ask(("a", "b", "c")))
    with Session(engine) as session:
        rows = session.scalars(select(AuditEntryRow).order_by(AuditEntryRow.entry_index)).all()
        entries = [canonical.decode(r.entry) for r in rows]
    assert [e["event"] for e in entries] == ["access.denied", "decryption.released"]
    assert entries[0]["fields"]["party"] == "helper" and entries[0]["subject"] == "round:4"
    assert entries[1]["fields"]["participant_ids"] == ["a", "b", "c"]
    assert verify_log(engine, public_key=signer.public_key).tree_size == 2
    with pytest.raises(UnknownEventType, match="access.denied"):
        sink.record("outlier.verdict", {})
    engine.dispose()


def test_memory_sink_refuses_unregistered_events() -> None:
    sink = MemoryAuditSink()
    sink.record("access.denied", {"party": "helper"})
    with pytest.raises(UnknownEventType, match="registered|allowed"):
        sink.record("access.granted", {})
    assert sink.named("access.denied") == [{"party": "helper"}] and len(sink.events) == 1


def test_fields_are_canonical_json_safe() -> None:
    out = canonical_fields(
        {
            "score": 1.5,
            "ids": ("a", "b"),
            "shape": [3, 2],
            "nan": float("nan"),
            "nested": {"w": 0.25},
            "flag": True,
            "none": None,
            "tiny": 1e-7,
        }
    )
    assert out == {
        "score": "1.5",
        "ids": ["a", "b"],
        "shape": [3, 2],
        "nan": "nan",
        "nested": {"w": "0.25"},
        "flag": True,
        "none": None,
        "tiny": "0.0000001",
    }
    assert canonical.decode(canonical.encode(out)) == out
