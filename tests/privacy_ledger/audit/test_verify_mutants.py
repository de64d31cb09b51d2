"""Audit-log verification at its boundaries: what surviving mutants showed unchecked.

``scripts/mutation audit-verify`` changed these and the audit tests stayed green
(docs/benchmarks.md, "Mutation testing", sixth run). A head accepted earlier that
covers exactly the entries stored today is the normal case of an auditor who
exported the newest head and verifies again before anything was appended: it must
verify, and one entry fewer must not; an earlier head must verify too. A head the
log's own key signed for another log (origin) is refused like a forged one. With a
single head (size 1), only that head reveals a rewritten history: it must be
compared with the recomputed tree. Each head refusal names the head, its size and
the reason in full.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.checkpoint import Checkpoint, sign_checkpoint, verify_head
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.merkle import SM3_HASHER
from privacy_ledger.audit.models import TreeHeadRow
from privacy_ledger.audit.verify.log import stored_public_key, verify_log
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.errors import (
    AuditParameterInvalid,
    HeadsInconsistent,
    HeadTampered,
    LedgerError,
    LogKeyMismatch,
    LogNotInitialized,
    LogTampered,
)
from tests.privacy_ledger.audit.conftest import ORIGIN, fill
from tests.privacy_ledger.audit.test_tamper import (
    Tamper,
    _edited,
    _put,
    delete_row,
    edit_bytes,
    edit_bytes_and_leaf,
    edit_subject_column,
    insert_in_middle,
)

SIZE = 20  # signed heads at 1, 9 and 17 (checkpoint_every=8), 3 entries unsigned


@pytest.fixture
def filled(engine: Engine, log: AuditLog) -> Engine:
    fill(engine, log, SIZE)
    return engine


def _refused(
    engine: Engine, log: AuditLog, error: type[LedgerError], text: str, **verify: Any
) -> Any:
    """Verify the log; it must refuse with ``error`` and exactly ``text`` after its code."""
    pattern = rf"^\[{re.escape(error.code)}\] {re.escape(text)}$"
    with pytest.raises(error, match=pattern) as info:
        verify_log(engine, public_key=log.public_key, **verify)
    return info.value


def test_a_trusted_head_of_the_whole_log_verifies_and_one_entry_less_does_not(
    filled: Engine, log: AuditLog
) -> None:
    report = verify_log(filled, public_key=log.public_key)
    whole = Checkpoint(origin=ORIGIN, tree_size=SIZE, root_hash=report.root_hash)
    again = verify_log(filled, public_key=log.public_key, trusted=whole)
    assert (again.tree_size, again.root_hash) == (SIZE, report.root_hash)
    with filled.begin() as conn:  # the newest entry removed and log_state made to agree
        conn.execute(text("DELETE FROM audit_entries WHERE entry_index = :i"), {"i": SIZE - 1})
        conn.execute(text("UPDATE log_state SET tree_size = :n"), {"n": SIZE - 1})
    text_ = (
        f"the log has {SIZE - 1} entries but a head of size {SIZE} was accepted earlier: "
        f"entries from {SIZE - 1} on were removed"
    )
    error = _refused(filled, log, LogTampered, text_, trusted=whole)
    assert (error.entry_index, error.tree_size) == (SIZE - 1, SIZE)


def test_an_earlier_trusted_head_verifies_and_another_history_is_named(
    filled: Engine, log: AuditLog
) -> None:
    with Session(filled) as session:
        rows = session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq)).all()
        heads = [verify_head(r.body, r.signature, log.public_key) for r in rows]
    assert [h.tree_size for h in heads] == [1, 9, 17]
    for head in heads:  # each head signed earlier is a prefix of today's log
        assert verify_log(filled, public_key=log.public_key, trusted=head).tree_size == SIZE
    other = Checkpoint(origin=ORIGIN, tree_size=12, root_hash=bytes(32))
    text_ = (
        "the first 12 entries differ from the head accepted earlier "
        "(history rewritten and re-signed)"
    )
    assert _refused(filled, log, HeadsInconsistent, text_, trusted=other).tree_size == 12


def test_a_head_signed_with_the_logs_key_for_another_origin_is_refused(
    filled: Engine, log: AuditLog, signer: SM2PrivateKey
) -> None:
    with filled.begin() as conn:
        root = bytes(
            conn.execute(text("SELECT root_hash FROM tree_heads WHERE seq = 2")).scalar_one()
        )
        other = sign_checkpoint(
            Checkpoint(origin="other.example/audit", tree_size=9, root_hash=root), signer
        )
        conn.execute(
            text("UPDATE tree_heads SET body = :b, signature = :s WHERE seq = 2"),
            {"b": other.body, "s": other.signature},
        )
    text_ = (
        "signed head #2 (size 9) is invalid: [LEDGER_CHECKPOINT_MALFORMED] origin: head is "
        f"for 'other.example/audit', want '{ORIGIN}'"
    )
    assert _refused(filled, log, HeadTampered, text_).tree_size == 9


@pytest.fixture
def filled_sqlite(tmp_path: Path, log: AuditLog) -> Iterator[Engine]:
    """SQLite keeps any value in any column (PostgreSQL's typed columns refuse the edit)."""
    engine = create_ledger_engine(f"sqlite:///{tmp_path / 'audit.db'}")
    upgrade(engine)
    fill(engine, log, SIZE)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.mark.parametrize("column", ["body", "signature", "root_hash"])
def test_a_head_column_of_the_wrong_type_is_named_with_its_head(
    filled_sqlite: Engine, log: AuditLog, column: str
) -> None:
    with filled_sqlite.begin() as conn:
        conn.execute(text(f"UPDATE tree_heads SET {column} = hex({column}) WHERE seq = 2"))
    text_ = "signed head #2: a column holds a value of the wrong type (altered)"
    assert _refused(filled_sqlite, log, HeadTampered, text_).tree_size == 9


def test_a_history_rewritten_under_the_first_head_alone_is_caught_by_it(
    engine: Engine, log: AuditLog
) -> None:
    """Five entries, one head (size 1): entry 0 altered and the chain rebuilt after it."""
    fill(engine, log, 5)
    assert verify_log(engine, public_key=log.public_key).heads_checked == 1
    with engine.begin() as conn:
        data = _edited(conn, 0, fields={})
        prev = SM3_HASHER.hash_leaf(data)
        _put(conn, 0, data, prev)
        for index in range(1, 5):
            data = _edited(conn, index, prev=prev.hex())
            prev = SM3_HASHER.hash_leaf(data)
            _put(conn, index, data, prev)
        conn.execute(text("UPDATE log_state SET last_leaf_hash = :h"), {"h": prev})
    text_ = (
        "entries [0, 1) do not match the signed head of size 1; first entry that may be altered: 0"
    )
    error = _refused(engine, log, LogTampered, text_)
    assert (error.entry_index, error.tree_size) == (0, 1)


def test_head_refusals_name_the_head_and_its_size(filled: Engine, log: AuditLog) -> None:
    with filled.begin() as conn:
        conn.execute(text("UPDATE tree_heads SET root_hash = :r WHERE seq = 2"), {"r": bytes(32)})
    text_ = "signed head #2 (size 9): stored size/root differ from its signed body"
    assert _refused(filled, log, HeadTampered, text_).tree_size == 9


def test_the_first_two_heads_swapped_are_inconsistent(filled: Engine, log: AuditLog) -> None:
    with filled.begin() as conn:  # sizes 9, 1, 17 in signing order
        conn.execute(text("UPDATE tree_heads SET seq = 99 WHERE seq = 1"))
        conn.execute(text("UPDATE tree_heads SET seq = 1 WHERE seq = 2"))
        conn.execute(text("UPDATE tree_heads SET seq = 2 WHERE seq = 99"))
    text_ = "signed head #2 has size 1 after a head of size 9"
    assert _refused(filled, log, HeadsInconsistent, text_).tree_size == 1


def test_a_head_count_that_disagrees_with_the_stored_heads_is_named(
    filled: Engine, log: AuditLog
) -> None:
    with filled.begin() as conn:
        conn.execute(text("UPDATE log_state SET head_count = 4"))
    text_ = "log_state counts 4 signed heads, 3 are stored"
    assert _refused(filled, log, HeadTampered, text_).tree_size == 17


def test_a_head_beyond_the_stored_entries_names_both_sizes(filled: Engine, log: AuditLog) -> None:
    with filled.begin() as conn:  # entries 15.. removed, log_state made to agree
        conn.execute(text("DELETE FROM audit_entries WHERE entry_index >= 15"))
        conn.execute(text("UPDATE log_state SET tree_size = 15"))
    text_ = (
        "signed head of size 17 covers entries the log lacks (only 15 stored); entry 15 is missing"
    )
    error = _refused(filled, log, LogTampered, text_)
    assert (error.entry_index, error.tree_size) == (15, 17)


def _rewritten(conn: Connection, index: int, **changes: object) -> None:
    """Entry ``index`` edited by ``changes`` and stored with its new leaf hash."""
    data = _edited(conn, index, **changes)
    _put(conn, index, data, SM3_HASHER.hash_leaf(data))


def _without_sensitive(conn: Connection) -> None:
    entry = canonical.decode(_edited(conn, 5))
    del entry["sensitive"]
    data = canonical.encode(entry)
    _put(conn, 5, data, SM3_HASHER.hash_leaf(data))


def _prev_not_a_string(conn: Connection) -> None:
    _rewritten(conn, 5, prev=5)


def _entry_2_links_to_0(conn: Connection) -> None:
    leaf0 = conn.execute(text("SELECT leaf_hash FROM audit_entries WHERE entry_index = 0"))
    _rewritten(conn, 2, prev=bytes(leaf0.scalar_one()).hex())


ENTRY_TEXTS = [
    (edit_bytes, 5, "stored bytes do not match the stored leaf hash (altered)"),
    (edit_subject_column, 6, "event/subject columns differ from the hashed entry (altered)"),
    (delete_row, 7, "missing (the next stored entry is 8; deleted)"),
    (edit_bytes_and_leaf, 11, "its hash differs from the one entry 12 recorded (altered)"),
    (_without_sensitive, 5, "not a canonical audit entry"),
    (_prev_not_a_string, 5, "altered or replaced (the chain is broken on both sides)"),
    (_entry_2_links_to_0, 2, "forged or duplicated: it links to entry 0"),
    (insert_in_middle, 13, "inserted (entry 14 directly follows 12)"),
]


@pytest.mark.parametrize(
    ("tamper", "bad", "reason"), ENTRY_TEXTS, ids=[c[0].__name__ for c in ENTRY_TEXTS]
)
def test_an_entry_refusal_names_the_entry_and_the_reason(
    filled: Engine, log: AuditLog, tamper: Tamper, bad: int, reason: str
) -> None:
    with filled.begin() as conn:
        tamper(conn)
    assert _refused(filled, log, LogTampered, f"entry {bad}: {reason}").entry_index == bad


def test_a_column_of_the_wrong_type_is_named_with_its_entry(
    filled_sqlite: Engine, log: AuditLog
) -> None:
    with filled_sqlite.begin() as conn:  # a BLOB subject next to a text event
        conn.execute(text("UPDATE audit_entries SET subject = x'00ff' WHERE entry_index = 5"))
    text_ = "entry 5: a column holds a value of the wrong type (altered)"
    _refused(filled_sqlite, log, LogTampered, text_)


def test_a_first_entry_that_links_nowhere_is_located_at_0(engine: Engine, log: AuditLog) -> None:
    fill(engine, log, 1)
    with engine.begin() as conn:  # not the genesis link, stored with its new leaf hash
        _rewritten(conn, 0, prev="01" * 32)
    with pytest.raises(LogTampered) as info:
        verify_log(engine, public_key=log.public_key)
    assert info.value.entry_index == 0


def test_a_database_without_the_audit_tables_or_their_state_row_is_named(
    tmp_path: Path, log: AuditLog
) -> None:
    bare = create_ledger_engine(f"sqlite:///{tmp_path / 'bare.db'}")
    try:
        text_ = "log_state: audit tables missing; run the migrations"
        _refused(bare, log, LogNotInitialized, text_)
        upgrade(bare)
        with bare.begin() as conn:
            conn.execute(text("DELETE FROM log_state"))
        _refused(bare, log, LogNotInitialized, "log_state: state row missing; run the migrations")
    finally:
        bare.dispose()


def test_an_unreadable_stored_public_key_is_named(filled: Engine) -> None:
    with filled.begin() as conn:
        conn.execute(text("UPDATE log_state SET public_key_pem = :p"), {"p": b"not a key"})
    pattern = (
        r"^\[LEDGER_LOG_KEY_MISMATCH\] log_state: stored public key is unreadable "
        r"\(\[CRYPTO_KEY_INVALID\] malformed PEM: expected exactly one -----BEGIN/END----- block\)$"
    )
    with pytest.raises(LogKeyMismatch, match=pattern):
        stored_public_key(filled)


def test_a_public_key_that_is_no_key_and_a_chunk_size_of_0_are_refused(
    filled: Engine, log: AuditLog
) -> None:
    with pytest.raises(
        AuditParameterInvalid,
        match=r"^\[LEDGER_AUDIT_PARAMETER_INVALID\] "
        r"public_key: must be a crypto\.sm\.SM2PublicKey$",
    ):
        verify_log(filled, public_key=log.public_key.to_pem())  # type: ignore[arg-type]
    _refused(filled, log, AuditParameterInvalid, "chunk_size: 0 must be >= 1", chunk_size=0)


@pytest.mark.parametrize(
    ("chunk_size", "done"), [(1, list(range(1, SIZE + 1))), (6, [6, 12, 18, 20])]
)
def test_small_chunks_verify_every_entry_and_report_progress_after_each(
    filled: Engine, log: AuditLog, chunk_size: int, done: list[int]
) -> None:
    whole = verify_log(filled, public_key=log.public_key)
    calls: list[tuple[int, int]] = []
    report = verify_log(
        filled,
        public_key=log.public_key,
        chunk_size=chunk_size,
        progress=lambda n, total: calls.append((n, total)),
    )
    assert report == whole
    assert calls == [(n, SIZE) for n in done]


def test_the_report_counts_heads_and_names_the_key(engine: Engine, log: AuditLog) -> None:
    empty = verify_log(engine, public_key=log.public_key)
    assert (empty.origin, empty.tree_size, empty.heads_checked) == (None, 0, 0)
    assert (empty.latest_head_size, empty.unsigned_entries) == (0, 0)
    fill(engine, log, 17)  # heads at 1, 9 and 17: the newest covers every entry
    report = verify_log(engine, public_key=log.public_key)
    assert (report.origin, report.tree_size, report.heads_checked) == (ORIGIN, 17, 3)
    assert (report.latest_head_size, report.unsigned_entries) == (17, 0)
    assert report.key_fingerprint == log.public_key.fingerprint()


def test_a_verification_is_logged_with_its_counts(
    filled: Engine, log: AuditLog, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="privacy_ledger.audit.verify.log"):
        verify_log(filled, public_key=log.public_key)
    assert caplog.messages[-1] == f"verified audit log: {SIZE} entries, 3 heads"
