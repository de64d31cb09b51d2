"""Ledger seal: the row log and the signed ``log_state`` (rows and tail covered).

Revision ID: 0005
Revises: 0004

Adds ``row_records`` (one record per change of a covered row: the SM3 of each
column's stored value, chained by SM3) and three ``log_state`` columns: the
row log's size and last hash, and ``seal``, an SM2 signature over the state's
counters. A key cannot be used inside a migration, so a ledger written before
this revision stays *unsealed* until its first writing transaction with the
log's key (or ``secure-fed ledger checkpoint --signing-key``), which records
every existing row as a baseline and signs the first seal; until then
``secure-fed ledger verify`` refuses it with ``LEDGER_NOT_SEALED``
(docs/audit/verify.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "row_records",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=False,
            nullable=False,
        ),
        sa.Column("table_name", sa.String(length=64), nullable=False),
        sa.Column("row_key", sa.String(length=512), nullable=False),
        sa.Column("record", sa.LargeBinary(), nullable=False),
        sa.Column("record_hash", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("seq >= 0", name=op.f("ck_row_records_seq")),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_row_records")),
    )
    op.create_index("ix_row_records_row", "row_records", ["table_name", "row_key"], unique=False)
    with op.batch_alter_table("log_state") as batch:
        batch.add_column(
            sa.Column("rows_size", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("rows_last_hash", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("seal", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    """Downgrade schema."""
    with op.batch_alter_table("log_state") as batch:
        batch.drop_column("seal")
        batch.drop_column("rows_last_hash")
        batch.drop_column("rows_size")
    op.drop_index("ix_row_records_row", table_name="row_records")
    op.drop_table("row_records")
