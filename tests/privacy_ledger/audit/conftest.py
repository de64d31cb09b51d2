"""Fixtures of the audit-log tests: each DB test runs on SQLite and (marked) PostgreSQL.

PostgreSQL tests get a schema of their own (``search_path`` in the URL), so
concurrent test runs never collide.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from crypto.sm import SM4GCM, SM2PrivateKey
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.db import create_ledger_engine, upgrade
from tests.privacy_ledger.conftest import pg_schema

ORIGIN = "test.secure-fed.example/audit"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def audit_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('audit') / 'ledger.db'}"
        return
    with pg_schema("audit_") as url:
        yield url


@pytest.fixture
def engine(audit_url: str) -> Iterator[Engine]:
    eng = create_ledger_engine(audit_url)
    upgrade(eng)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture(scope="session")
def signer() -> SM2PrivateKey:
    return SM2PrivateKey.generate()


@pytest.fixture(scope="session")
def evidence_key() -> SM4GCM:
    return SM4GCM(SM4GCM.generate_key())


@pytest.fixture
def log(signer: SM2PrivateKey, evidence_key: SM4GCM) -> AuditLog:
    return AuditLog(signer=signer, origin=ORIGIN, evidence_key=evidence_key, checkpoint_every=8)


def fill(engine: Engine, log: AuditLog, n: int, *, start: int = 0) -> None:
    """Append ``n`` entries in one transaction, checkpointing as the policy says."""
    with Session(engine) as session:
        for i in range(start, start + n):
            log.append(
                session,
                event="budget.reserved",
                subject=f"participant:p{i % 3}",
                fields={"n": i, "epsilon": f"0.{i + 1}"},
                sensitive={"reason": f"note {i}"} if i % 4 == 0 else None,
            )
            log.checkpoint(session)
        session.commit()
