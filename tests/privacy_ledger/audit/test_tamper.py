"""Rows edited, deleted, reordered and inserted directly in SQL are detected and located.

The log has 20 entries, signed heads at sizes 1, 9 and 17, and 3 unsigned
entries. Every tampering happens through plain SQL on the tables, on SQLite
and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Connection, Engine, select, text
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.checkpoint import Checkpoint, sign_checkpoint, verify_head
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.merkle import SM3_HASHER
from privacy_ledger.audit.models import TreeHeadRow
from privacy_ledger.audit.verify.log import verify_log
from privacy_ledger.errors import (
    HeadsInconsistent,
    HeadTampered,
    LogKeyMismatch,
    LogTampered,
    StateTampered,
)
from tests.privacy_ledger.audit.conftest import ORIGIN, fill

SIZE = 20
Tamper = Callable[[Connection], None]


@pytest.fixture
def filled(engine: Engine, log: AuditLog) -> Engine:
    fill(engine, log, SIZE)
    report = verify_log(engine, public_key=log.public_key)
    assert (report.tree_size, report.heads_checked, report.latest_head_size) == (SIZE, 3, 17)
    return engine


def _row(conn: Connection, index: int) -> tuple[bytes, bytes, str, str]:
    row = conn.execute(
        text("SELECT entry, leaf_hash, event, subject FROM audit_entries WHERE entry_index = :i"),
        {"i": index},
    ).one()
    return bytes(row[0]), bytes(row[1]), row[2], row[3]


def _put(conn: Connection, index: int, entry: bytes, leaf: bytes | None = None) -> None:
    conn.execute(
        text("UPDATE audit_entries SET entry = :e, leaf_hash = :h WHERE entry_index = :i"),
        {"e": entry, "h": leaf if leaf is not None else _row(conn, index)[1], "i": index},
    )


def _edited(conn: Connection, at: int, /, **changes: object) -> bytes:
    entry = canonical.decode(_row(conn, at)[0])
    entry.update(changes)
    return canonical.encode(entry)


def _insert(conn: Connection, index: int, subject: str, entry: bytes) -> None:
    """Insert a forged ``budget.reserved`` row with its true leaf hash; the log grows to 21."""
    conn.execute(
        text(
            "INSERT INTO audit_entries (entry_index, event, subject, entry, leaf_hash) "
            "VALUES (:i, 'budget.reserved', :s, :e, :h)"
        ),
        {"i": index, "s": subject, "e": entry, "h": SM3_HASHER.hash_leaf(entry)},
    )
    conn.execute(text("UPDATE log_state SET tree_size = 21"))


def _shift(conn: Connection, after: int, delta: int) -> None:
    """Move entries > ``after`` by ``delta`` one row at a time (unique key safe)."""
    indexes = [
        r[0]
        for r in conn.execute(
            text("SELECT entry_index FROM audit_entries WHERE entry_index > :a ORDER BY 1"),
            {"a": after},
        )
    ]
    for index in indexes if delta < 0 else reversed(indexes):
        conn.execute(
            text("UPDATE audit_entries SET entry_index = :n WHERE entry_index = :i"),
            {"n": index + delta, "i": index},
        )


# --- entries -----------------------------------------------------------------------------


def edit_bytes(conn: Connection) -> None:
    _put(conn, 5, _edited(conn, 5, fields={"n": 5, "epsilon": "0.0"}))


def edit_bytes_and_leaf(conn: Connection) -> None:
    new = _edited(conn, 11, subject="participant:zz")
    conn.execute(
        text(
            "UPDATE audit_entries SET entry = :e, leaf_hash = :h, subject = :s "
            "WHERE entry_index = 11"
        ),
        {"e": new, "h": SM3_HASHER.hash_leaf(new), "s": "participant:zz"},
    )


def edit_subject_column(conn: Connection) -> None:
    conn.execute(text("UPDATE audit_entries SET subject = 'participant:zz' WHERE entry_index = 6"))


def edit_sealed_field(conn: Connection) -> None:
    entry = canonical.decode(_row(conn, 12)[0])
    blob = entry["sensitive"]["reason"]
    entry["sensitive"]["reason"] = ("A" if blob[0] != "A" else "B") + blob[1:]
    new = canonical.encode(entry)
    _put(conn, 12, new, SM3_HASHER.hash_leaf(new))


def edit_unsigned_tail(conn: Connection) -> None:
    new = _edited(conn, 18, fields={})
    _put(conn, 18, new, SM3_HASHER.hash_leaf(new))


def delete_row(conn: Connection) -> None:
    conn.execute(text("DELETE FROM audit_entries WHERE entry_index = 7"))


def delete_and_close_gap(conn: Connection) -> None:
    conn.execute(text("DELETE FROM audit_entries WHERE entry_index = 4"))
    _shift(conn, 4, -1)
    conn.execute(text("UPDATE log_state SET tree_size = tree_size - 1"))


def delete_last(conn: Connection) -> None:
    conn.execute(text("DELETE FROM audit_entries WHERE entry_index = 19"))


def delete_signed_tail(conn: Connection) -> None:
    conn.execute(text("DELETE FROM audit_entries WHERE entry_index >= 15"))
    conn.execute(text("UPDATE log_state SET tree_size = 15"))


def swap_rows(conn: Connection) -> None:
    a, b = _row(conn, 3), _row(conn, 13)
    for index, (entry, leaf, event, subject) in ((3, b), (13, a)):
        conn.execute(
            text(
                "UPDATE audit_entries SET entry = :e, leaf_hash = :h, event = :v, "
                "subject = :s WHERE entry_index = :i"
            ),
            {"e": entry, "h": leaf, "v": event, "s": subject, "i": index},
        )


def swap_rows_renumbered(conn: Connection) -> None:
    a = canonical.decode(_row(conn, 2)[0])
    b = canonical.decode(_row(conn, 10)[0])
    a["index"], b["index"] = 10, 2
    for index, entry in ((2, b), (10, a)):
        data = canonical.encode(entry)
        conn.execute(
            text(
                "UPDATE audit_entries SET entry = :e, leaf_hash = :h, subject = :s "
                "WHERE entry_index = :i"
            ),
            {"e": data, "h": SM3_HASHER.hash_leaf(data), "s": entry["subject"], "i": index},
        )


def insert_at_end(conn: Connection) -> None:
    _insert(conn, 20, "participant:p1", _edited(conn, 19, index=20))


def insert_in_middle(conn: Connection) -> None:
    prev = _row(conn, 12)[1]
    _shift(conn, 12, +1)
    _insert(
        conn,
        13,
        "participant:p0",
        _edited(conn, 12, index=13, prev=prev.hex(), fields={"forged": True}),
    )


def rewrite_history_from(conn: Connection) -> None:
    """Alter entry 10 and re-chain every later entry: only the signed head can tell."""
    prev = _row(conn, 9)[1]
    for index in range(10, SIZE):
        data = _edited(conn, index, prev=prev.hex(), **({"fields": {}} if index == 10 else {}))
        prev = SM3_HASHER.hash_leaf(data)
        _put(conn, index, data, prev)
    conn.execute(text("UPDATE log_state SET last_leaf_hash = :h"), {"h": prev})


ENTRY_CASES = [
    (edit_bytes, 5),
    (edit_bytes_and_leaf, 11),
    (edit_subject_column, 6),
    (edit_sealed_field, 12),
    (edit_unsigned_tail, 18),
    (delete_row, 7),
    (delete_and_close_gap, 4),
    (delete_last, 19),
    (delete_signed_tail, 15),
    (swap_rows, 3),
    (swap_rows_renumbered, 2),
    (insert_at_end, 20),
    (insert_in_middle, 13),
    (rewrite_history_from, 9),  # located to the span [9, 17) of the head it breaks
]


@pytest.mark.parametrize(("tamper", "bad"), ENTRY_CASES, ids=[c[0].__name__ for c in ENTRY_CASES])
def test_entry_tampering_is_located(
    filled: Engine, log: AuditLog, tamper: Tamper, bad: int
) -> None:
    with filled.begin() as conn:
        tamper(conn)
    with pytest.raises(LogTampered) as info:
        verify_log(filled, public_key=log.public_key)
    assert info.value.entry_index == bad, str(info.value)
    assert f"{bad}" in str(info.value) and info.value.code == "LEDGER_LOG_TAMPERED"


# --- signed heads ------------------------------------------------------------------------


def head_body_edited(conn: Connection) -> None:
    conn.execute(
        text("UPDATE tree_heads SET body = :b WHERE seq = 2"),
        {"b": Checkpoint(origin=ORIGIN, tree_size=9, root_hash=bytes(32)).body()},
    )


def head_root_column_edited(conn: Connection) -> None:
    conn.execute(text("UPDATE tree_heads SET root_hash = :r WHERE seq = 2"), {"r": bytes(32)})


def head_signature_edited(conn: Connection) -> None:
    sig = bytes(conn.execute(text("SELECT signature FROM tree_heads WHERE seq = 1")).scalar_one())
    conn.execute(text("UPDATE tree_heads SET signature = :s WHERE seq = 2"), {"s": sig})


def head_deleted(conn: Connection) -> None:
    conn.execute(text("DELETE FROM tree_heads WHERE seq = 2"))


def newest_head_deleted(conn: Connection) -> None:
    conn.execute(text("DELETE FROM tree_heads WHERE seq = 3"))


def head_forged_and_inserted(conn: Connection) -> None:
    forged = sign_checkpoint(
        Checkpoint(origin=ORIGIN, tree_size=19, root_hash=bytes(32)), SM2PrivateKey.generate()
    )
    conn.execute(
        text(
            "INSERT INTO tree_heads (seq, tree_size, root_hash, body, signature, "
            "key_fingerprint, signed_at) VALUES (4, 19, :r, :b, :s, :f, 0)"
        ),
        {"r": bytes(32), "b": forged.body, "s": forged.signature, "f": forged.key_fingerprint},
    )
    conn.execute(text("UPDATE log_state SET head_count = 4, last_head_size = 19"))


HEAD_CASES = [
    (head_body_edited, HeadTampered, 9),
    (head_root_column_edited, HeadTampered, 9),
    (head_signature_edited, HeadTampered, 9),
    (head_deleted, HeadTampered, 17),
    (newest_head_deleted, HeadTampered, 17),
    (head_forged_and_inserted, HeadTampered, 19),
]


@pytest.mark.parametrize(
    ("tamper", "kind", "size"), HEAD_CASES, ids=[c[0].__name__ for c in HEAD_CASES]
)
def test_head_tampering_is_located(
    filled: Engine, log: AuditLog, tamper: Tamper, kind: type[LogTampered], size: int
) -> None:
    with filled.begin() as conn:
        tamper(conn)
    with pytest.raises(kind) as info:
        verify_log(filled, public_key=log.public_key)
    assert info.value.tree_size == size, str(info.value)
    assert info.value.code == "LEDGER_HEAD_TAMPERED" and f"{size}" in str(info.value)


def test_heads_reordered_are_inconsistent(filled: Engine, log: AuditLog) -> None:
    with filled.begin() as conn:
        conn.execute(text("UPDATE tree_heads SET seq = 99 WHERE seq = 2"))
        conn.execute(text("UPDATE tree_heads SET seq = 2 WHERE seq = 3"))
        conn.execute(text("UPDATE tree_heads SET seq = 3 WHERE seq = 99"))
        conn.execute(text("UPDATE log_state SET last_head_size = 9"))
    with pytest.raises(HeadsInconsistent, match="size 9 after a head of size 17") as info:
        verify_log(filled, public_key=log.public_key)
    assert info.value.tree_size == 9


def test_truncation_with_heads_is_caught_by_the_seal_and_a_trusted_head(
    filled: Engine, log: AuditLog
) -> None:
    with Session(filled) as session:
        accepted = session.scalars(select(TreeHeadRow).where(TreeHeadRow.seq == 3)).one()
        trusted = verify_head(accepted.body, accepted.signature, log.public_key)
    with filled.begin() as conn:  # remove entries 15.. with their heads, fix log_state
        leaf = bytes(
            conn.execute(
                text("SELECT leaf_hash FROM audit_entries WHERE entry_index = 14")
            ).scalar_one()
        )
        conn.execute(text("DELETE FROM audit_entries WHERE entry_index >= 15"))
        conn.execute(text("DELETE FROM tree_heads WHERE seq = 3"))
        conn.execute(
            text(
                "UPDATE log_state SET tree_size = 15, last_leaf_hash = :h, "
                "head_count = 2, last_head_size = 9"
            ),
            {"h": leaf},
        )
    with pytest.raises(StateTampered, match="does not match its SM2 seal"):
        verify_log(filled, public_key=log.public_key)  # the seal signs 17 entries, 3 heads
    with pytest.raises(LogTampered, match="entries from 15 on were removed") as info:
        verify_log(filled, public_key=log.public_key, trusted=trusted)
    assert info.value.entry_index == 15 and info.value.tree_size == 17


def test_trusted_head_must_match_history(filled: Engine, log: AuditLog) -> None:
    other_root = Checkpoint(origin=ORIGIN, tree_size=12, root_hash=bytes(32))
    with pytest.raises(HeadsInconsistent, match="first 12 entries differ"):
        verify_log(filled, public_key=log.public_key, trusted=other_root)
    elsewhere = Checkpoint(origin="other.example/log", tree_size=1, root_hash=bytes(32))
    with pytest.raises(LogKeyMismatch, match="trusted: head is for 'other.example/log'"):
        verify_log(filled, public_key=log.public_key, trusted=elsewhere)
