"""API tokens of the REST service (salted HMAC-SM3 hashes, role, scopes, expiry).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("participant_id", sa.String(length=128), nullable=True),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("salt", sa.LargeBinary(), nullable=False),
        sa.Column("secret_hash", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("revoked_at", sa.Double(), nullable=True),
        sa.Column("replaced_by", sa.String(length=16), nullable=True),
        sa.CheckConstraint(
            "role IN ('participant', 'officer', 'admin', 'service')",
            name=op.f("ck_api_tokens_role"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_table("api_tokens")
