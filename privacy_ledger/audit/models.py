"""SQLAlchemy 2.0 models of the tamper-evident audit log (RFC 9162-style, SM3/SM2).

Four tables, created by migrations ``0002`` and ``0005``:

``audit_entries``
    One row per entry: its index (the Merkle leaf index), the exact canonical
    JSON bytes that were hashed, and the SM3 leaf hash. ``event`` and
    ``subject`` repeat two fields of the JSON for queries; the verifier checks
    that they agree with the hashed bytes.
``tree_heads``
    Signed tree heads: the C2SP checkpoint body and its DER SM2 signature,
    stored as bytes exactly as signed, plus copies of size and root for queries.
``log_state``
    A single row (``id = 1``, inserted by the migration) that serializes
    appends (row lock) and records the log's origin, hash, signing public key
    and its fingerprint, the current size and the last leaf hash. Since ``0005``
    it also carries the *ledger seal*: an SM2 signature over its own counters and
    the row log's size and last hash, renewed in every writing transaction
    (:mod:`privacy_ledger.audit.rows`).
``row_records``
    The row log (``0005``): one record per change of a row of a covered
    table (``rounds``, ``uploads``, ``budgets``...), holding the SM3 of each
    column's stored value, chained by SM3 and sealed through ``log_state``.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, CheckConstraint, Double, Index, Integer, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from privacy_ledger.models import Base

__all__ = ["AuditEntryRow", "TreeHeadRow", "LogStateRow", "RowRecordRow", "LOG_STATE_ID"]

# SQLite: INTEGER PRIMARY KEY is the rowid (no second index), still 64-bit.
_INDEX = BigInteger().with_variant(Integer(), "sqlite")

#: Primary key of the single ``log_state`` row.
LOG_STATE_ID = 1


class AuditEntryRow(Base):
    """One audit-log entry: canonical JSON bytes and their SM3 leaf hash."""

    __tablename__ = "audit_entries"
    __table_args__ = (CheckConstraint("entry_index >= 0", name="entry_index"),)

    entry_index: Mapped[int] = mapped_column(_INDEX, primary_key=True, autoincrement=False)
    event: Mapped[str] = mapped_column(String(64), index=True)
    subject: Mapped[str] = mapped_column(String(256), index=True)
    entry: Mapped[bytes] = mapped_column(LargeBinary)
    leaf_hash: Mapped[bytes] = mapped_column(LargeBinary)


class TreeHeadRow(Base):
    """A signed tree head (C2SP checkpoint body + DER SM2 signature)."""

    __tablename__ = "tree_heads"
    __table_args__ = (
        CheckConstraint("tree_size >= 0", name="tree_size"),
        CheckConstraint("seq >= 1", name="seq"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    tree_size: Mapped[int] = mapped_column(BigInteger, unique=True)
    root_hash: Mapped[bytes] = mapped_column(LargeBinary)
    body: Mapped[bytes] = mapped_column(LargeBinary)
    signature: Mapped[bytes] = mapped_column(LargeBinary)
    key_fingerprint: Mapped[str] = mapped_column(String(64))
    signed_at: Mapped[float] = mapped_column(Double)


class LogStateRow(Base):
    """The log's single state row, also its append lock."""

    __tablename__ = "log_state"
    __table_args__ = (CheckConstraint(f"id = {LOG_STATE_ID}", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    origin: Mapped[str | None] = mapped_column(String(255))
    hash_name: Mapped[str | None] = mapped_column(String(16))
    public_key_pem: Mapped[bytes | None] = mapped_column(LargeBinary)
    key_fingerprint: Mapped[str | None] = mapped_column(String(64))
    tree_size: Mapped[int] = mapped_column(BigInteger)
    last_leaf_hash: Mapped[bytes | None] = mapped_column(LargeBinary)
    head_count: Mapped[int] = mapped_column(Integer)
    last_head_size: Mapped[int] = mapped_column(BigInteger)
    last_head_at: Mapped[float | None] = mapped_column(Double)
    rows_size: Mapped[int] = mapped_column(BigInteger, server_default="0")
    rows_last_hash: Mapped[bytes | None] = mapped_column(LargeBinary)
    seal: Mapped[bytes | None] = mapped_column(LargeBinary)


class RowRecordRow(Base):
    """One record of the row log: a covered row's column digests after a change."""

    __tablename__ = "row_records"
    __table_args__ = (
        CheckConstraint("seq >= 0", name="seq"),
        Index("ix_row_records_row", "table_name", "row_key"),
    )

    seq: Mapped[int] = mapped_column(_INDEX, primary_key=True, autoincrement=False)
    table_name: Mapped[str] = mapped_column(String(64))
    row_key: Mapped[str] = mapped_column(String(512))
    record: Mapped[bytes] = mapped_column(LargeBinary)
    record_hash: Mapped[bytes] = mapped_column(LargeBinary)
