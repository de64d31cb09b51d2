"""The ledger seal: a changed byte in any covered table, or a truncated tail, is named.

An attacker with write access to the database but without the log's key flips one
byte of a stored value (every covered table), deletes or inserts a row, or deletes
the entries after the newest signed head and edits ``log_state`` to match. Each
attempt is refused by ``verify_log`` and by ``secure-fed ledger verify`` (exit 1,
the typed code, table / row key / column named). SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from api.cli import app
from crypto.sm import SM2PrivateKey
from privacy_ledger import PrivacyLedger, RoundStore
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.errors import (
    LedgerNotSealed,
    RowAltered,
    RowDeleted,
    RowUnrecorded,
    StateTampered,
)
from tests.privacy_ledger.audit.conftest import ORIGIN
from tests.privacy_ledger.helpers import event, setup_budget

runner = CliRunner()
ROUND = "demo:00000001"
PAYLOAD = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="

#: (table, primary-key column, key value, column to flip): one value the operator relies on each.
FLIPS = [
    ("rounds", "id", ROUND, "state"),
    ("uploads", "id", 1, "digest"),
    ("decryption_requests", "id", 1, "what"),
    ("budgets", "participant_id", "h1", "epsilon_limit"),
    ("privacy_events", "participant_id", "h1", "epsilon_projected"),
    ("participants", "id", "h1", "institution"),
    ("data_assets", "participant_id", "h1", "description"),
]


@pytest.fixture
def sealed(engine: Engine, signer: SM2PrivateKey) -> Iterator[tuple[Engine, AuditLog]]:
    """A ledger as a federation leaves it: budgets, a charge, a round, an upload, a decryption."""
    log = AuditLog(signer=signer, origin=ORIGIN, checkpoint_every=4)
    ledger = PrivacyLedger(engine, audit=log)
    setup_budget(ledger)
    reservation = ledger.reserve("h1", "ct", event(), round_id=ROUND)
    ledger.commit(reservation.id)
    rounds = RoundStore(engine)
    rounds.save(ROUND, stage="collect", state={"uploads": {}})
    rounds.record_upload(ROUND, "h1", digest="ab" * 32, size=27, kind="ckks", shape=[4, 2])
    rounds.save(
        ROUND,
        stage="published",
        state={"uploads": {"h1": {"payload": PAYLOAD}}},
        expected_stage="collect",
    )
    rounds.record_decryption(
        ROUND, requester="keyauthority", kind="aggregate", what="sum of scores", aggregate_size=8
    )
    report = verify_log(engine, public_key=signer.public_key, compare_rows=True)
    assert report.sealed and report.rows_checked == 7 and report.row_records >= 7
    yield engine, log


def _pem(tmp_path: Path, signer: SM2PrivateKey) -> str:
    pem = tmp_path / "log-pub.pem"
    pem.write_bytes(signer.public_key.to_pem())
    return str(pem)


def _cli(engine: Engine, pem: str) -> tuple[int, str]:
    url = engine.url.render_as_string(hide_password=False)
    result = runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", pem])
    return result.exit_code, result.output


def _flip(engine: Engine, table: str, pk: str, key: object, column: str) -> None:
    """Change one character of a stored value, in place, as an attacker with SQL access would."""
    with engine.begin() as conn:
        cast = "CAST(:v AS JSON)" if column == "state" and engine.dialect.name != "sqlite" else ":v"
        value = conn.execute(
            text(f"SELECT CAST({column} AS TEXT) FROM {table} WHERE {pk} = :k"), {"k": key}
        ).scalar_one()
        if column == "state":
            flipped = value.replace(PAYLOAD, "R" + PAYLOAD[1:])
        else:
            flipped = ("9" if value[0] != "9" else "8") + value[1:]
        assert flipped != value
        conn.execute(
            text(f"UPDATE {table} SET {column} = {cast} WHERE {pk} = :k"), {"v": flipped, "k": key}
        )


@pytest.mark.parametrize(("table", "pk", "key", "column"), FLIPS, ids=[f[0] for f in FLIPS])
def test_a_flipped_byte_in_every_covered_table_is_named(
    sealed: tuple[Engine, AuditLog],
    signer: SM2PrivateKey,
    tmp_path: Path,
    table: str,
    pk: str,
    key: object,
    column: str,
) -> None:
    engine, _log = sealed
    _flip(engine, table, pk, key, column)
    with pytest.raises(RowAltered) as info:
        verify_log(engine, public_key=signer.public_key, compare_rows=True)
    assert (info.value.table, info.value.column) == (table, column), str(info.value)
    assert info.value.row_key is not None
    if pk == "id":
        assert info.value.row_key == (f"[{key}]" if isinstance(key, int) else f'["{key}"]')
    code, output = _cli(engine, _pem(tmp_path, signer))
    assert code == 1, output
    assert "LEDGER_ROW_ALTERED" in output and f"table {table}, row " in output
    assert f"column {column}" in output


def test_a_flipped_round_is_a_typed_error_where_it_is_read(
    sealed: tuple[Engine, AuditLog],
) -> None:
    engine, _log = sealed
    _flip(engine, "rounds", "id", ROUND, "state")
    with pytest.raises(RowAltered, match="column state"):
        RoundStore(engine).load(ROUND)
    if engine.dialect.name == "sqlite":  # no longer JSON (PostgreSQL's json type refuses it)
        with engine.begin() as conn:
            conn.execute(text("UPDATE rounds SET state = '{\"up' WHERE id = :k"), {"k": ROUND})
        with pytest.raises(RowAltered, match="table rounds, row .*, column state"):
            RoundStore(engine).load(ROUND)


def test_deleted_and_inserted_rows_are_named(
    sealed: tuple[Engine, AuditLog], signer: SM2PrivateKey
) -> None:
    engine, _log = sealed
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM decryption_requests"))
    with pytest.raises(RowDeleted, match="table decryption_requests, row \\[1\\]"):
        verify_log(engine, public_key=signer.public_key, compare_rows=True)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO decryption_requests (id, round_id, requester, kind, what, "
                "aggregate_size, created_at) VALUES (1, :r, 'keyauthority', 'aggregate', "
                "'sum of scores', 8, 0)"
            ),
            {"r": ROUND},
        )
        conn.execute(
            text(
                "INSERT INTO rounds (id, stage, state, created_at, updated_at) "
                "VALUES ('forged:1', 'published', '{}', 0, 0)"
            )
        )
    with pytest.raises(RowUnrecorded, match='table rounds, row \\["forged:1"\\]'):
        verify_log(engine, public_key=signer.public_key, compare_rows=True)


def test_row_records_cannot_be_rewritten_or_dropped(
    sealed: tuple[Engine, AuditLog], signer: SM2PrivateKey
) -> None:
    engine, _log = sealed
    with engine.begin() as conn:  # drop the newest record: the round's last write is forgotten
        last = conn.execute(text("SELECT MAX(seq) FROM row_records")).scalar_one()
        conn.execute(text("DELETE FROM row_records WHERE seq = :s"), {"s": last})
        conn.execute(text("UPDATE log_state SET rows_size = :s"), {"s": last})
    with pytest.raises(StateTampered):
        verify_log(engine, public_key=signer.public_key, compare_rows=True)


def test_a_deleted_tail_with_consistent_log_state_is_detected(
    sealed: tuple[Engine, AuditLog], signer: SM2PrivateKey, tmp_path: Path
) -> None:
    """No key: delete every entry after the newest head, make ``log_state`` agree with the rest."""
    engine, log = sealed
    with Session(engine) as session:  # two more entries, not under any head
        for i in range(2):
            log.append(session, event="round.aborted", subject="round:9", fields={"n": i})
        session.commit()
    with engine.begin() as conn:
        head = conn.execute(text("SELECT MAX(tree_size) FROM tree_heads")).scalar_one()
        size = conn.execute(text("SELECT tree_size FROM log_state")).scalar_one()
        assert size > head
        leaf = conn.execute(
            text("SELECT leaf_hash FROM audit_entries WHERE entry_index = :i"), {"i": head - 1}
        ).scalar_one()
        conn.execute(text("DELETE FROM audit_entries WHERE entry_index >= :i"), {"i": head})
        conn.execute(
            text("UPDATE log_state SET tree_size = :n, last_leaf_hash = :h"),
            {"n": head, "h": leaf},
        )
    with pytest.raises(StateTampered, match="does not match its SM2 seal"):
        verify_log(engine, public_key=signer.public_key, compare_rows=True)
    code, output = _cli(engine, _pem(tmp_path, signer))
    assert code == 1 and "LEDGER_STATE_TAMPERED" in output, output
    with engine.begin() as conn:  # removing the seal too only makes the ledger unsealed
        conn.execute(text("UPDATE log_state SET seal = NULL"))
    with pytest.raises(LedgerNotSealed):
        verify_log(engine, public_key=signer.public_key, compare_rows=True)
    code, output = _cli(engine, _pem(tmp_path, signer))
    assert code == 1 and "LEDGER_NOT_SEALED" in output, output


def test_a_ledger_written_before_seals_is_refused_then_sealed_by_checkpoint(
    engine: Engine, signer: SM2PrivateKey, tmp_path: Path
) -> None:
    """The upgrade path: an unsealed ledger fails verify until ``ledger checkpoint`` seals it."""
    log = AuditLog(signer=signer, origin=ORIGIN, checkpoint_every=4)
    ledger = PrivacyLedger(engine, audit=log)
    setup_budget(ledger)
    RoundStore(engine).save(ROUND, stage="collect", state={"a": 1})
    with engine.begin() as conn:  # what a ledger written before migration 0005 looks like
        conn.execute(text("DELETE FROM row_records"))
        conn.execute(text("UPDATE log_state SET seal = NULL, rows_size = 0, rows_last_hash = NULL"))
    with pytest.raises(LedgerNotSealed, match="ledger checkpoint"):
        verify_log(engine, public_key=signer.public_key, compare_rows=True)
    report = verify_log(
        engine, public_key=signer.public_key, allow_unsealed=True, compare_rows=True
    )
    assert not report.sealed and any("table rounds: 1 rows" in s for s in report.not_covered)
    key = tmp_path / "log.pem"
    key.write_bytes(signer.to_pem_unencrypted_insecure())
    url = engine.url.render_as_string(hide_password=False)
    result = runner.invoke(app, ["ledger", "checkpoint", "--signing-key", str(key), "--db", url])
    assert result.exit_code == 0, result.output
    report = verify_log(engine, public_key=signer.public_key, compare_rows=True)
    assert report.sealed and report.rows_checked == 4 and report.unsigned_entries == 0
