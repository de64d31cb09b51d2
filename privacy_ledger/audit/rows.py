"""The ledger seal: covered rows in an SM3-chained row log, ``log_state`` signed with SM2.

The audit log proves its own entries; the operator also relies on the tables
beside it (a round's stored state and uploads, budgets, reservations and
charges, participants). Two mechanisms extend the log's protection to them:

* **Row log.** Every transaction that changes a row of a :data:`COVERED` table
  appends, in the *same transaction*, one record per changed row to
  ``row_records``: the table, the row key and the SM3 of each column's value
  as stored (read back from the database after the write, so the record is
  what was applied). Records are chained: ``hash_i = SM3(hash_{i-1} || record_i)``.
* **Seal.** The same transaction (and every transaction that appends audit
  entries or signs a head) renews ``log_state.seal``: an SM2 signature, with the
  log's key, over the state's counters (entry count, last leaf hash, head count,
  newest head size) and the row log's size and last hash (:func:`seal_body`).

Without the key, an attacker can no longer delete the entries after the newest
signed head and edit ``log_state`` to match, nor change a covered row and its
record, nor remove records: each of these changes a sealed value. What the seal
cannot reveal is a *rollback* of the whole database (entries, heads, rows and
the seal) to an earlier sealed moment; a head accepted earlier
(``secure-fed ledger verify --trusted-head``) catches that.

The writers need no change: a :class:`~sqlalchemy.orm.Session` listener collects
the covered rows every flush touches (ORM writes; bulk ``UPDATE`` statements
are not seen, so the ledger's writers use the ORM), and a ``before_commit``
listener records them and signs the seal. It finds the key through the
session (a transaction that appended an entry) or through the engine the
ledger registered with :func:`cover_engine` (``PrivacyLedger(engine,
audit=log)`` does). Rows written on an engine without the key are not
recorded, and ``ledger verify`` names them (``LEDGER_ROW_UNRECORDED``).
"""

from __future__ import annotations

import hmac
import logging
import weakref
from collections.abc import Iterable, Iterator
from decimal import Decimal
from itertools import chain
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, Engine, Select, Table, Text, cast, event, select, type_coerce
from sqlalchemy.orm import Session, object_mapper
from sqlalchemy.orm.session import SessionTransaction
from sqlalchemy.sql.sqltypes import NullType

from crypto.sm import DEFAULT_SM2_ID, SM2PrivateKey
from crypto.sm.sm3 import sm3_digest
from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import LogStateRow, RowRecordRow
from privacy_ledger.audit.store import TAIL_KEY, AppendTail, claim_state, lock_state
from privacy_ledger.errors import CanonicalJSONInvalid, RowAltered
from privacy_ledger.models import (
    Budget,
    DataAsset,
    DecryptionRequestRow,
    Participant,
    PrivacyEventRow,
    RoundRow,
    UploadRow,
)

if TYPE_CHECKING:
    from privacy_ledger.audit.log import AuditLog

__all__ = [
    "COVERED",
    "SEAL_KEY",
    "ROW_GENESIS",
    "Sealer",
    "cover_engine",
    "covering_log",
    "seal_body",
    "row_key",
    "stored_record",
    "record_hash",
    "check_row",
    "checkpoint_engine",
]

logger = logging.getLogger(__name__)

#: The tables whose rows the row log records (every table of :mod:`privacy_ledger.models`).
COVERED: dict[str, Table] = {
    model.__table__.name: model.__table__  # type: ignore[attr-defined,misc]
    for model in (
        Participant,
        DataAsset,
        Budget,
        PrivacyEventRow,
        RoundRow,
        UploadRow,
        DecryptionRequestRow,
    )
}
#: ``session.info`` key: the :class:`Sealer` that must seal this transaction.
SEAL_KEY = "secure_fed.ledger.sealer"
_PENDING = "secure_fed.ledger.rows_pending"
#: ``prev`` of the first row record.
ROW_GENESIS = bytes(32)
SEAL_VERSION = 1
RECORD_VERSION = 1

_registry: weakref.WeakKeyDictionary[Engine, AuditLog] = weakref.WeakKeyDictionary()


def cover_engine(engine: Engine, log: AuditLog) -> None:
    """Record and seal the covered rows every session on ``engine`` writes, with ``log``'s key."""
    _registry[engine] = log


def covering_log(bind: object) -> AuditLog | None:
    """Return the log registered for ``bind`` (an Engine or Connection), or ``None``."""
    engine = getattr(bind, "engine", bind)
    if not isinstance(engine, Engine):
        return None
    return _registry.get(engine)


def checkpoint_engine(engine: Engine) -> int | None:
    """Sign a head over every unsigned entry with the log registered for ``engine``.

    Returns
    -------
    int or None
        The new head's size, or ``None`` when nothing was unsigned or no log is registered.
    """
    log = covering_log(engine)
    if log is None:
        return None
    with Session(engine) as session:
        head = log.checkpoint(session, force=True)
        session.commit()
    return None if head is None else head.tree_size


# -- canonical column values --------------------------------------------------------------


def _encode(value: object) -> bytes:
    """Typed bytes of one stored value (as the driver returns it, no type processing)."""
    if value is None:
        return b"n:"
    if isinstance(value, bool):
        return b"b:1" if value else b"b:0"
    if isinstance(value, int):
        return b"i:" + str(value).encode()
    if isinstance(value, float):
        return b"f:" + repr(value).encode()
    if isinstance(value, Decimal):
        return b"d:" + str(value).encode()
    if isinstance(value, str):
        return b"s:" + value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes | bytearray | memoryview):
        return b"x:" + bytes(value)
    return b"r:" + repr(value).encode("utf-8", "replace")


def _raw_columns(table: Table) -> list[Any]:
    """Columns read as stored: JSON as its text, everything else without result processing."""
    return [
        cast(c, Text).label(c.name)
        if isinstance(c.type, JSON)
        else type_coerce(c, NullType()).label(c.name)
        for c in table.columns
    ]


def _raw_select(table: Table) -> Select[Any]:
    return select(*_raw_columns(table))


def row_key(values: Iterable[object]) -> str:
    """Return the row key of primary-key ``values``: their canonical JSON list."""
    return canonical.encode([v if isinstance(v, int | str) else str(v) for v in values]).decode()


def _digests(table: Table, row: Any) -> dict[str, str]:
    mapping = row._mapping
    return {c.name: sm3_digest(_encode(mapping[c.name])).hex() for c in table.columns}


def _record(table: str, key: str, columns: dict[str, str] | None) -> bytes:
    return canonical.encode({"columns": columns, "key": key, "table": table, "v": RECORD_VERSION})


def record_hash(prev: bytes, record: bytes) -> bytes:
    """SM3 chain link of a row record: ``SM3(prev || record)``."""
    return sm3_digest(prev + record)


def _pk_values(table: Table, key: str) -> list[object]:
    try:
        values = canonical.decode(key.encode())
    except CanonicalJSONInvalid:
        values = None
    if not isinstance(values, list) or len(values) != len(table.primary_key.columns):
        raise RowAltered(f"{table.name}: row key {key!r} is not a key", table=table.name)
    return values


def stored_record(session: Session, table: Table, key: str) -> bytes:
    """Return the record of row ``key`` of ``table`` as stored now (``columns: null``: absent)."""
    values = _pk_values(table, key)
    query = _raw_select(table).where(
        *(c == v for c, v in zip(table.primary_key.columns, values, strict=True))
    )
    row = session.execute(query).first()
    return _record(table.name, key, None if row is None else _digests(table, row))


def _latest(session: Session, table: str, key: str) -> bytes | None:
    value = session.scalar(
        select(RowRecordRow.record)
        .where(RowRecordRow.table_name == table, RowRecordRow.row_key == key)
        .order_by(RowRecordRow.seq.desc())
        .limit(1)
    )
    return None if value is None else bytes(value)


def iter_table(session: Session, table: Table, chunk: int = 2000) -> Iterator[tuple[str, Any]]:
    """Yield ``(row key, raw row)`` of every row of ``table`` in primary-key order."""
    pk = list(table.primary_key.columns)
    offset = 0
    while True:
        rows = session.execute(_raw_select(table).order_by(*pk).limit(chunk).offset(offset)).all()
        for row in rows:
            yield row_key(row._mapping[c.name] for c in pk), row
        if len(rows) < chunk:
            return
        offset += chunk


def column_digests(table: Table, row: Any) -> dict[str, str]:
    """SM3 (hex) of each column's stored value of a raw row from :func:`iter_table`."""
    return _digests(table, row)


def check_row(session: Session, table_name: str, key: str) -> None:
    """Raise :class:`RowAltered` if the stored row differs from its newest row record.

    A row without any record (a ledger written before the seal) is not judged here;
    ``secure-fed ledger verify`` reports it.

    Raises
    ------
    RowAltered
        ``LEDGER_ROW_ALTERED``, naming the table, row key and first differing column.
    """
    table = COVERED[table_name]
    latest = _latest(session, table_name, key)
    if latest is None:
        return
    current = stored_record(session, table, key)
    if hmac.compare_digest(current, latest):
        return
    want = canonical.decode(latest).get("columns") or {}
    have = canonical.decode(current).get("columns") or {}
    column = next((c for c in sorted(set(want) | set(have)) if want.get(c) != have.get(c)), None)
    raise RowAltered(
        f"table {table_name}, row {key}, column {column}: the stored value differs from the "
        "SM3 the row log recorded when the ledger wrote it",
        table=table_name,
        row_key=key,
        column=column,
    )


# -- the seal -------------------------------------------------------------------------------


def seal_body(state: LogStateRow) -> bytes:
    """Return the bytes the seal signs: ``log_state``'s counters and the row log's position."""
    last_leaf = state.last_leaf_hash
    rows_last = state.rows_last_hash
    return canonical.encode(
        {
            "head_count": int(state.head_count),
            "kind": "secure-fed ledger seal",
            "last_head_size": int(state.last_head_size),
            "last_leaf": "" if last_leaf is None else bytes(last_leaf).hex(),
            "origin": state.origin or "",
            "rows_last": "" if rows_last is None else bytes(rows_last).hex(),
            "rows_size": int(state.rows_size or 0),
            "tree_size": int(state.tree_size),
            "v": SEAL_VERSION,
        }
    )


class Sealer:
    """Records a transaction's covered rows and signs ``log_state`` (one per :class:`AuditLog`).

    Parameters
    ----------
    log
        The audit log whose origin and key seal the ledger.
    signer
        The log's SM2 signing key.
    """

    def __init__(self, log: AuditLog, signer: SM2PrivateKey) -> None:
        self._log = log
        self._key = signer

    def __reduce__(self) -> Any:
        raise TypeError("Sealer holds a signing key and cannot be pickled")

    def _state(self, session: Session) -> LogStateRow:
        tail = session.info.get(TAIL_KEY)
        if isinstance(tail, AppendTail) and tail.transaction is session.get_transaction():
            return tail.state
        return lock_state(session)

    def seal(self, session: Session, pending: set[tuple[str, str]]) -> None:
        """Append the row records of ``pending`` rows and sign the seal (in ``session``)."""
        state = self._state(session)
        log = self._log
        claim_state(state, origin=log.origin, hash_name=log.hasher.name, key=log.public_key)
        if state.seal is None and not state.rows_size:
            pending = pending | self._baseline(session, pending)
        seq = int(state.rows_size or 0)
        prev = bytes(state.rows_last_hash) if state.rows_last_hash is not None else ROW_GENESIS
        for table_name, key in sorted(pending):
            record = stored_record(session, COVERED[table_name], key)
            latest = _latest(session, table_name, key)
            absent = canonical.decode(record)["columns"] is None
            if (latest is None and absent) or (
                latest is not None and hmac.compare_digest(latest, record)
            ):
                continue
            prev = record_hash(prev, record)
            session.add(
                RowRecordRow(
                    seq=seq, table_name=table_name, row_key=key, record=record, record_hash=prev
                )
            )
            seq += 1
        if seq:
            state.rows_size, state.rows_last_hash = seq, prev
        state.seal = self._key.sign(seal_body(state), distid=DEFAULT_SM2_ID)

    @staticmethod
    def _baseline(session: Session, pending: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """Return every row stored before the first seal (written before migration 0005)."""
        found = {
            (name, key) for name, table in COVERED.items() for key, _ in iter_table(session, table)
        }
        if found - pending:
            logger.warning(
                "sealing a ledger written before row records: %d rows as baseline",
                len(found - pending),
            )
        return found


# -- session listeners ----------------------------------------------------------------------


def _collect(session: Session, _flush_context: object) -> None:
    """Remember the covered rows this flush inserted, updated or deleted."""
    pending: set[tuple[str, str]] | None = None
    for obj in chain(session.new, session.dirty, session.deleted):
        table = getattr(type(obj), "__table__", None)
        if not isinstance(table, Table) or table.name not in COVERED:
            continue
        values = object_mapper(obj).primary_key_from_instance(obj)
        if any(v is None for v in values):
            continue
        if pending is None:
            pending = session.info.setdefault(_PENDING, set())
        pending.add((table.name, row_key(values)))


def _covering_sealer(session: Session) -> Sealer | None:
    try:
        log = covering_log(session.get_bind())
    except Exception:  # noqa: BLE001 - an unbound session has no ledger to seal
        return None
    return None if log is None else log.sealer


def _before_commit(session: Session) -> None:
    """Record the transaction's covered rows and sign the seal before it commits.

    ``before_commit`` runs before the commit's own flush, so the session is
    flushed here first: the rows it writes are then known and read back as stored.
    """
    sealer = session.info.get(SEAL_KEY)
    if not isinstance(sealer, Sealer):
        sealer = _covering_sealer(session)
        if sealer is None:
            session.info.pop(_PENDING, None)
            return
        session.flush()
        if not session.info.get(_PENDING):
            return
    else:
        session.flush()
    pending = session.info.pop(_PENDING, set())
    session.info.pop(SEAL_KEY, None)
    sealer.seal(session, pending)


def _forget(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:
        session.info.pop(_PENDING, None)
        session.info.pop(SEAL_KEY, None)


event.listen(Session, "after_flush", _collect)
event.listen(Session, "before_commit", _before_commit)
event.listen(Session, "after_transaction_end", _forget)
