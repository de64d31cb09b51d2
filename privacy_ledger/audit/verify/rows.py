"""Verification of the ledger seal: ``log_state``'s SM2 seal, the row log, the covered tables.

:func:`verify_seal` runs after the entry and head checks of
:func:`~privacy_ledger.audit.verify.log.verify_log`, which establish that
``log_state``'s counters match the stored entries and heads. Then:

1. the seal is an SM2 signature (the log's key) over those counters and the row
   log's size and last hash (:func:`~privacy_ledger.audit.rows.seal_body`):
   otherwise ``LEDGER_STATE_TAMPERED`` (a tail deleted with consistent
   ``log_state`` edits ends here);
2. the row log replays as an SM3 chain ending in the sealed hash, with the
   sealed number of records: otherwise ``LEDGER_ROW_LOG_TAMPERED``;
3. every row of every covered table equals its newest record column by column
   (``LEDGER_ROW_ALTERED`` naming table, row key and column), every recorded row
   is present (``LEDGER_ROW_DELETED``) and every stored row is recorded
   (``LEDGER_ROW_UNRECORDED``).

A ledger never sealed (written before migration ``0005`` and not written since
with the key) is refused with ``LEDGER_NOT_SEALED`` unless the caller accepts
it explicitly (``allow_unsealed``), in which case the report says it is not covered.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from crypto import SignatureInvalid
from crypto.sm import DEFAULT_SM2_ID, SM2PublicKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import LOG_STATE_ID, AuditEntryRow, LogStateRow, RowRecordRow
from privacy_ledger.audit.rows import (
    COVERED,
    ROW_GENESIS,
    column_digests,
    iter_table,
    record_hash,
    seal_body,
)
from privacy_ledger.errors import (
    CanonicalJSONInvalid,
    LedgerNotSealed,
    RowAltered,
    RowDeleted,
    RowLogTampered,
    RowUnrecorded,
    StateTampered,
)

__all__ = ["SealReport", "verify_seal", "compare_rows"]

_MAX_SIGNATURE = 80


@dataclass(frozen=True, kw_only=True)
class SealReport:
    """What :func:`verify_seal` checked.

    Attributes
    ----------
    sealed
        Whether the ledger carries a seal (``False``: not covered, only with ``allow_unsealed``).
    row_records
        Records of the row log replayed.
    rows_checked
        Rows of the covered tables compared with their records.
    not_covered
        Human-readable lines naming what is *not* covered (empty when sealed).
    """

    sealed: bool
    row_records: int
    rows_checked: int
    not_covered: tuple[str, ...] = ()


def _check_signature(state: LogStateRow, public_key: SM2PublicKey) -> None:
    seal = state.seal
    if not isinstance(seal, bytes | memoryview) or not 0 < len(seal) <= _MAX_SIGNATURE:
        raise StateTampered("log_state: the seal is not a DER SM2 signature (altered)")
    try:
        public_key.verify(seal_body(state), bytes(seal), distid=DEFAULT_SM2_ID)
    except SignatureInvalid:
        raise StateTampered(
            f"log_state does not match its SM2 seal (entries {state.tree_size}, heads "
            f"{state.head_count}, row records {state.rows_size}): its counters were edited, "
            "e.g. entries after the newest signed head deleted"
        ) from None


def _check_last_leaf(session: Session, state: LogStateRow) -> None:
    if not state.tree_size:
        return
    stored = session.scalar(
        select(AuditEntryRow.leaf_hash).where(AuditEntryRow.entry_index == state.tree_size - 1)
    )
    last = state.last_leaf_hash
    if stored is None or last is None or not hmac.compare_digest(bytes(stored), bytes(last)):
        raise StateTampered("log_state: the last leaf hash is not the newest entry's leaf hash")


def _replay(
    session: Session, state: LogStateRow, chunk: int
) -> tuple[int, dict[tuple[str, str], dict[str, str] | None]]:
    """Replay the row log; return its size and the newest columns per row (None: deleted)."""
    latest: dict[tuple[str, str], dict[str, str] | None] = {}
    prev, expected = ROW_GENESIS, 0
    while True:
        rows = (
            session.execute(
                select(RowRecordRow)
                .where(RowRecordRow.seq >= expected)
                .order_by(RowRecordRow.seq)
                .limit(chunk)
            )
            .scalars()
            .all()
        )
        if not rows:
            break
        for row in rows:
            if row.seq != expected:
                raise RowLogTampered(f"row record {expected} is missing (next stored: {row.seq})")
            data = row.record
            if not isinstance(data, bytes | memoryview) or not isinstance(
                row.record_hash, bytes | memoryview
            ):
                raise RowLogTampered(f"row record {row.seq}: a column has the wrong type")
            data = bytes(data)
            prev = record_hash(prev, data)
            if not hmac.compare_digest(prev, bytes(row.record_hash)):
                raise RowLogTampered(f"row record {row.seq}: altered (its SM3 chain link differs)")
            try:
                record = canonical.decode(data)
                table, key, columns = record["table"], record["key"], record["columns"]
            except (CanonicalJSONInvalid, KeyError, TypeError):
                raise RowLogTampered(f"row record {row.seq}: not a row record") from None
            if (table, key) != (row.table_name, row.row_key) or table not in COVERED:
                raise RowLogTampered(f"row record {row.seq}: table/key columns differ from it")
            latest[(table, key)] = columns
            expected += 1
    last = state.rows_last_hash
    sealed_last = ROW_GENESIS if last is None else bytes(last)
    if expected != int(state.rows_size or 0) or not hmac.compare_digest(prev, sealed_last):
        raise RowLogTampered(
            f"the row log holds {expected} records, the seal covers {state.rows_size}: "
            f"records from {min(expected, int(state.rows_size or 0))} on were removed or added"
        )
    return expected, latest


def _compare(session: Session, latest: dict[tuple[str, str], dict[str, str] | None]) -> int:
    checked = 0
    for name, table in COVERED.items():
        for key, row in iter_table(session, table):
            checked += 1
            want = latest.pop((name, key), None)
            if want is None:
                raise RowUnrecorded(
                    f"table {name}, row {key}: stored, but the ledger never recorded writing it",
                    table=name,
                    row_key=key,
                )
            have = column_digests(table, row)
            for column in sorted(set(want) | set(have)):
                if not hmac.compare_digest(want.get(column, ""), have.get(column, "")):
                    raise RowAltered(
                        f"table {name}, row {key}, column {column}: the stored value differs "
                        "from the SM3 the row log recorded",
                        table=name,
                        row_key=key,
                        column=column,
                    )
    for (name, key), columns in sorted(latest.items()):
        if columns is not None:
            raise RowDeleted(
                f"table {name}, row {key}: recorded by the row log but missing (deleted)",
                table=name,
                row_key=key,
            )
    return checked


def verify_seal(
    session: Session,
    state: LogStateRow,
    public_key: SM2PublicKey,
    *,
    allow_unsealed: bool = False,
    chunk_size: int = 5000,
    compare: bool = True,
) -> SealReport:
    """Verify ``log_state``'s seal, the row log and every covered table (see the module doc).

    Raises
    ------
    LedgerNotSealed
        The ledger has no seal (and ``allow_unsealed`` is false).
    StateTampered, RowLogTampered, RowAltered, RowDeleted, RowUnrecorded
        The first fault, naming table, row key and column where it is in a row.
    """
    if state.seal is None:
        counts = {
            name: sum(1 for _ in iter_table(session, table)) for name, table in COVERED.items()
        }
        lines = tuple(
            f"NOT COVERED: table {name}: {n} rows (written before ledger seals)"
            for name, n in counts.items()
            if n
        ) + ("NOT COVERED: log_state (a deleted unsigned tail would not be detected)",)
        if not allow_unsealed and (state.tree_size or any(counts.values()) or state.rows_size):
            raise LedgerNotSealed(
                "this ledger has no seal (written before ledger seals): its rows and "
                "log_state are not covered; seal it with 'secure-fed ledger checkpoint "
                "--signing-key KEY' (docs/audit/verify.md)"
            )
        return SealReport(sealed=False, row_records=0, rows_checked=0, not_covered=lines)
    _check_signature(state, public_key)
    _check_last_leaf(session, state)
    records, latest = _replay(session, state, chunk_size)
    checked = _compare(session, latest) if compare else 0
    return SealReport(sealed=True, row_records=records, rows_checked=checked)


def compare_rows(bind: Engine | Session, *, chunk_size: int = 5000) -> int:
    """Compare every covered row with its newest row record; return the rows checked.

    Run after :func:`~privacy_ledger.audit.verify.log.verify_log` (``compare_rows=False``)
    has verified the seal and the row log.

    Raises
    ------
    RowAltered, RowDeleted, RowUnrecorded
        The first row that differs, is missing or was never recorded.
    """
    session = bind if isinstance(bind, Session) else Session(bind)
    try:
        state = session.get(LogStateRow, LOG_STATE_ID)
        if state is None or state.seal is None:
            return 0
        _records, latest = _replay(session, state, chunk_size)
        return _compare(session, latest)
    finally:
        if session is not bind:
            session.close()
