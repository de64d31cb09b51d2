"""Rows rewritten with a value of the wrong SQL type are reported as tampering, not a crash.

SQLite stores any value in any column: an attacker with write access can put
TEXT or an INTEGER where the log keeps BLOBs, or TEXT where it keeps event
names. The verifier must name the entry (or head), as for any other edit.
PostgreSQL's typed columns refuse such writes, so these cases run on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.errors import HeadTampered, LogTampered
from tests.privacy_ledger.audit.conftest import fill

SIZE = 12


@pytest.fixture
def filled_sqlite(tmp_path: Path, log: AuditLog) -> Iterator[Engine]:
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'audit.db'}")
    upgrade(engine)
    fill(engine, log, SIZE)
    verify_log(engine, public_key=log.public_key)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("entry", "CAST(entry AS TEXT)"),
        ("entry", "42"),
        ("leaf_hash", "hex(leaf_hash)"),
        ("leaf_hash", "3.5"),
        ("event", "7"),
        ("subject", "x'00ff'"),
    ],
)
def test_wrong_typed_entry_column_is_located(
    filled_sqlite: Engine, log: AuditLog, column: str, value: str
) -> None:
    with filled_sqlite.begin() as conn:
        conn.execute(text(f"UPDATE audit_entries SET {column} = {value} WHERE entry_index = 5"))
    with pytest.raises(LogTampered) as caught:
        verify_log(filled_sqlite, public_key=log.public_key)
    assert caught.value.entry_index == 5


@pytest.mark.parametrize(
    ("column", "value"),
    [("body", "CAST(body AS TEXT)"), ("signature", "hex(signature)"), ("root_hash", "'00'")],
)
def test_wrong_typed_head_column_is_located(
    filled_sqlite: Engine, log: AuditLog, column: str, value: str
) -> None:
    with filled_sqlite.begin() as conn:
        conn.execute(text(f"UPDATE tree_heads SET {column} = {value} WHERE seq = 1"))
    with pytest.raises(HeadTampered):
        verify_log(filled_sqlite, public_key=log.public_key)
