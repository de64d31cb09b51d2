"""Ledger core: participants, data assets, budgets, privacy events, rounds, uploads, decryptions.

Revision ID: 0001
Revises: (none)

The audit-log tables (audit entries, tree heads, log state) follow in revision
0002. Budgets keep epsilon limits as decimal strings; timestamps are epoch
seconds (double precision).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema."""
    op.create_table('participants',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('institution', sa.String(length=256), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('public_key_pem', sa.LargeBinary(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.CheckConstraint("kind IN ('hospital', 'bank', 'other')", name=op.f('ck_participants_kind')),
    sa.CheckConstraint("status IN ('active', 'suspended')", name=op.f('ck_participants_status')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_participants'))
    )
    op.create_table('rounds',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('stage', sa.String(length=64), nullable=False),
    sa.Column('state', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.Column('updated_at', sa.Double(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rounds'))
    )
    op.create_table('data_assets',
    sa.Column('participant_id', sa.String(length=128), nullable=False),
    sa.Column('asset_id', sa.String(length=128), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.ForeignKeyConstraint(['participant_id'], ['participants.id'], name=op.f('fk_data_assets_participant_id_participants')),
    sa.PrimaryKeyConstraint('participant_id', 'asset_id', name=op.f('pk_data_assets'))
    )
    op.create_table('decryption_requests',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('round_id', sa.String(length=128), nullable=False),
    sa.Column('requester', sa.String(length=128), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('what', sa.Text(), nullable=False),
    sa.Column('aggregate_size', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.CheckConstraint('aggregate_size >= 0', name=op.f('ck_decryption_requests_aggregate_size')),
    sa.ForeignKeyConstraint(['round_id'], ['rounds.id'], name=op.f('fk_decryption_requests_round_id_rounds')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_decryption_requests'))
    )
    op.create_index(op.f('ix_decryption_requests_round_id'), 'decryption_requests', ['round_id'], unique=False)

    op.create_table('uploads',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('round_id', sa.String(length=128), nullable=False),
    sa.Column('participant_id', sa.String(length=128), nullable=False),
    sa.Column('digest', sa.String(length=128), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('shape', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.CheckConstraint('size >= 0', name=op.f('ck_uploads_size')),
    sa.ForeignKeyConstraint(['participant_id'], ['participants.id'], name=op.f('fk_uploads_participant_id_participants')),
    sa.ForeignKeyConstraint(['round_id'], ['rounds.id'], name=op.f('fk_uploads_round_id_rounds')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_uploads'))
    )
    op.create_index(op.f('ix_uploads_participant_id'), 'uploads', ['participant_id'], unique=False)
    op.create_index(op.f('ix_uploads_round_id'), 'uploads', ['round_id'], unique=False)

    op.create_table('budgets',
    sa.Column('participant_id', sa.String(length=128), nullable=False),
    sa.Column('asset_id', sa.String(length=128), nullable=False),
    sa.Column('epsilon_limit', sa.String(length=64), nullable=False),
    sa.Column('delta', sa.Double(), nullable=False),
    sa.Column('accountant', sa.String(length=16), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.Column('updated_at', sa.Double(), nullable=False),
    sa.CheckConstraint("accountant IN ('rdp', 'prv')", name=op.f('ck_budgets_accountant')),
    sa.CheckConstraint('delta > 0 AND delta < 1', name=op.f('ck_budgets_delta')),
    sa.ForeignKeyConstraint(['participant_id', 'asset_id'], ['data_assets.participant_id', 'data_assets.asset_id'], name='fk_budgets_asset_data_assets'),
    sa.PrimaryKeyConstraint('participant_id', 'asset_id', name=op.f('pk_budgets'))
    )
    op.create_table('privacy_events',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('participant_id', sa.String(length=128), nullable=False),
    sa.Column('asset_id', sa.String(length=128), nullable=False),
    sa.Column('round_id', sa.String(length=128), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('accountant', sa.String(length=16), nullable=False),
    sa.Column('noise_multiplier', sa.Double(), nullable=False),
    sa.Column('sample_rate', sa.Double(), nullable=False),
    sa.Column('steps', sa.Integer(), nullable=False),
    sa.Column('max_grad_norm', sa.Double(), nullable=False),
    sa.Column('delta', sa.Double(), nullable=False),
    sa.Column('sampler', sa.String(length=32), nullable=False),
    sa.Column('mechanism', sa.String(length=32), nullable=False),
    sa.Column('versions', sa.JSON(), nullable=False),
    sa.Column('epsilon_projected', sa.String(length=64), nullable=False),
    sa.Column('released_anything', sa.Boolean(), nullable=True),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.Column('expires_at', sa.Double(), nullable=False),
    sa.Column('resolved_at', sa.Double(), nullable=True),
    sa.CheckConstraint("state IN ('reserved', 'committed', 'aborted', 'expired')", name=op.f('ck_privacy_events_state')),
    sa.CheckConstraint('steps >= 1', name=op.f('ck_privacy_events_steps')),
    sa.ForeignKeyConstraint(['participant_id', 'asset_id'], ['budgets.participant_id', 'budgets.asset_id'], name='fk_privacy_events_budget_budgets'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_privacy_events'))
    )
    op.create_index('ix_privacy_events_budget_state', 'privacy_events', ['participant_id', 'asset_id', 'state'], unique=False)
    op.create_index('ix_privacy_events_state_expires', 'privacy_events', ['state', 'expires_at'], unique=False)



def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index('ix_privacy_events_state_expires', table_name='privacy_events')
    op.drop_index('ix_privacy_events_budget_state', table_name='privacy_events')

    op.drop_table('privacy_events')
    op.drop_table('budgets')
    op.drop_index(op.f('ix_uploads_round_id'), table_name='uploads')
    op.drop_index(op.f('ix_uploads_participant_id'), table_name='uploads')

    op.drop_table('uploads')
    op.drop_index(op.f('ix_decryption_requests_round_id'), table_name='decryption_requests')

    op.drop_table('decryption_requests')
    op.drop_table('data_assets')
    op.drop_table('rounds')
    op.drop_table('participants')
