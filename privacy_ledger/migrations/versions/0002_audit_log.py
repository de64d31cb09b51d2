"""Audit log: audit entries, signed tree heads and the log state / append-lock row.

Revision ID: 0002
Revises: 0001

Entries keep the exact canonical JSON bytes that were hashed (SM3 leaf
hash = SM3(0x00 || entry)); tree heads keep the C2SP checkpoint body and the
DER SM2 signature as bytes. The single ``log_state`` row is inserted here so
that the first append can lock it like every later one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "audit_entries",
        sa.Column("entry_index", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=False, nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=256), nullable=False),
        sa.Column("entry", sa.LargeBinary(), nullable=False),
        sa.Column("leaf_hash", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("entry_index >= 0", name=op.f("ck_audit_entries_entry_index")),
        sa.PrimaryKeyConstraint("entry_index", name=op.f("pk_audit_entries")),
    )
    op.create_index(op.f("ix_audit_entries_event"), "audit_entries", ["event"], unique=False)
    op.create_index(op.f("ix_audit_entries_subject"), "audit_entries", ["subject"], unique=False)
    op.create_table(
        "tree_heads",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("tree_size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.LargeBinary(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("signature", sa.LargeBinary(), nullable=False),
        sa.Column("key_fingerprint", sa.String(length=64), nullable=False),
        sa.Column("signed_at", sa.Double(), nullable=False),
        sa.CheckConstraint("tree_size >= 0", name=op.f("ck_tree_heads_tree_size")),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_tree_heads_seq")),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_tree_heads")),
        sa.UniqueConstraint("tree_size", name=op.f("uq_tree_heads_tree_size")),
    )
    log_state = op.create_table(
        "log_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("origin", sa.String(length=255), nullable=True),
        sa.Column("hash_name", sa.String(length=16), nullable=True),
        sa.Column("public_key_pem", sa.LargeBinary(), nullable=True),
        sa.Column("key_fingerprint", sa.String(length=64), nullable=True),
        sa.Column("tree_size", sa.BigInteger(), nullable=False),
        sa.Column("last_leaf_hash", sa.LargeBinary(), nullable=True),
        sa.Column("head_count", sa.Integer(), nullable=False),
        sa.Column("last_head_size", sa.BigInteger(), nullable=False),
        sa.Column("last_head_at", sa.Double(), nullable=True),
        sa.CheckConstraint("id = 1", name=op.f("ck_log_state_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_state")),
    )
    op.bulk_insert(
        log_state,
        [{"id": 1, "tree_size": 0, "head_count": 0, "last_head_size": 0}],
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("log_state")
    op.drop_table("tree_heads")
    op.drop_index(op.f("ix_audit_entries_subject"), table_name="audit_entries")
    op.drop_index(op.f("ix_audit_entries_event"), table_name="audit_entries")
    op.drop_table("audit_entries")
