from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.errors import UnknownEventType
from secure_fed.secure.audit import LedgerAuditSink, canonical_fields
from secure_fed.secure.scoring.outlier import OutlierPolicy


def test_decisions_land_in_the_signed_log(tmp_path: Path) -> None:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    upgrade(engine)
    log = AuditLog(signer=SM2PrivateKey.generate(), origin="test.example/audit",
                   checkpoint_every=1)
    sink = LedgerAuditSink(engine=engine, log=log)
    policy = OutlierPolicy(dof=9, audit=sink)
    policy.round_id = 4
    policy.decide({"a": 9.5, "b": 8.0, "c": 500.0})
    with Session(engine) as session:
        assert log.size(session) == 3
    with pytest.raises(UnknownEventType, match="outlier.decision"):
        sink.record("outlier.verdict", {})
    engine.dispose()


def test_fields_are_canonical_json_safe() -> None:
    out = canonical_fields({"score": 1.5, "ids": ("a", "b"), "shape": [3, 2], "nan": float("nan"),
                            "nested": {"w": 0.25}, "flag": True, "none": None})
    assert out == {"score": "1.5", "ids": ["a", "b"], "shape": [3, 2], "nan": "nan",
                   "nested": {"w": "0.25"}, "flag": True, "none": None}
