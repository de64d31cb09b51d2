"""SQLAlchemy 2.0 typed models of the privacy ledger (docs/audit/ledger.md).

The schema is created only through the Alembic migrations shipped in
``privacy_ledger/migrations``; a test checks that these models and the
migrations agree on SQLite and PostgreSQL. Timestamps are seconds since the
Unix epoch (UTC) stored as double precision, so the injectable clock of
:class:`privacy_ledger.PrivacyLedger` maps onto them without time-zone games.

Epsilon limits are stored as decimal *strings*: SQLite has no exact decimal
type, and a budget must never be compared through a float that may have
rounded down (docs/background.md, DP accounting).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Base",
    "Participant",
    "DataAsset",
    "Budget",
    "PrivacyEventRow",
    "RoundRow",
    "UploadRow",
    "DecryptionRequestRow",
    "PARTICIPANT_KINDS",
    "PARTICIPANT_STATUSES",
    "EVENT_STATES",
]

PARTICIPANT_KINDS = ("hospital", "bank", "other")
PARTICIPANT_STATUSES = ("active", "suspended")
EVENT_STATES = ("reserved", "committed", "aborted", "expired")

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID = String(128)


def _in(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{v}'" for v in values)
    return f"{column} IN ({quoted})"


class Base(DeclarativeBase):
    """Declarative base shared by every ledger table (budgets and audit log)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Participant(Base):
    """A hospital, bank or other institution taking part in federations."""

    __tablename__ = "participants"
    __table_args__ = (
        CheckConstraint(_in("kind", PARTICIPANT_KINDS), name="kind"),
        CheckConstraint(_in("status", PARTICIPANT_STATUSES), name="status"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    institution: Mapped[str] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(16))
    public_key_pem: Mapped[bytes | None] = mapped_column(LargeBinary)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Double)


class DataAsset(Base):
    """A data set held by one participant; budgets are kept per asset."""

    __tablename__ = "data_assets"

    participant_id: Mapped[str] = mapped_column(ForeignKey("participants.id"), primary_key=True)
    asset_id: Mapped[str] = mapped_column(ID, primary_key=True)
    description: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Double)


class Budget(Base):
    """The (epsilon, delta) limit of one participant's asset and its accountant.

    ``version`` increases on every change of the row (limit changes and every
    reservation resolution lock this row first, so it is the serialization point).
    """

    __tablename__ = "budgets"
    __table_args__ = (
        ForeignKeyConstraint(
            ["participant_id", "asset_id"],
            ["data_assets.participant_id", "data_assets.asset_id"],
            name="fk_budgets_asset_data_assets",
        ),
        CheckConstraint(_in("accountant", ("rdp", "prv")), name="accountant"),
        CheckConstraint("delta > 0 AND delta < 1", name="delta"),
    )

    participant_id: Mapped[str] = mapped_column(ID, primary_key=True)
    asset_id: Mapped[str] = mapped_column(ID, primary_key=True)
    epsilon_limit: Mapped[str] = mapped_column(String(64))
    delta: Mapped[float] = mapped_column(Double)
    accountant: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)


class PrivacyEventRow(Base):
    """One mechanism event: a reservation and its resolution, with every accountant input."""

    __tablename__ = "privacy_events"
    __table_args__ = (
        ForeignKeyConstraint(
            ["participant_id", "asset_id"],
            ["budgets.participant_id", "budgets.asset_id"],
            name="fk_privacy_events_budget_budgets",
        ),
        CheckConstraint(_in("state", EVENT_STATES), name="state"),
        CheckConstraint("steps >= 1", name="steps"),
        Index("ix_privacy_events_budget_state", "participant_id", "asset_id", "state"),
        Index("ix_privacy_events_state_expires", "state", "expires_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    participant_id: Mapped[str] = mapped_column(ID)
    asset_id: Mapped[str] = mapped_column(ID)
    round_id: Mapped[str | None] = mapped_column(ID)
    state: Mapped[str] = mapped_column(String(16))
    accountant: Mapped[str] = mapped_column(String(16))
    noise_multiplier: Mapped[float] = mapped_column(Double)
    sample_rate: Mapped[float] = mapped_column(Double)
    steps: Mapped[int] = mapped_column(Integer)
    max_grad_norm: Mapped[float] = mapped_column(Double)
    delta: Mapped[float] = mapped_column(Double)
    sampler: Mapped[str] = mapped_column(String(32))
    mechanism: Mapped[str] = mapped_column(String(32))
    versions: Mapped[dict[str, Any]] = mapped_column(JSON)
    epsilon_projected: Mapped[str] = mapped_column(String(64))
    released_anything: Mapped[bool | None] = mapped_column()
    created_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float] = mapped_column(Double)
    resolved_at: Mapped[float | None] = mapped_column(Double)


class RoundRow(Base):
    """Persistent state of one federation round (stage constant plus JSON state)."""

    __tablename__ = "rounds"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    stage: Mapped[str] = mapped_column(String(64))
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)
    updated_at: Mapped[float] = mapped_column(Double)


class UploadRow(Base):
    """Evidence of one payload that left a participant: never the payload itself."""

    __tablename__ = "uploads"
    __table_args__ = (CheckConstraint("size >= 0", name="size"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    round_id: Mapped[str] = mapped_column(ForeignKey("rounds.id"), index=True)
    participant_id: Mapped[str] = mapped_column(ForeignKey("participants.id"), index=True)
    digest: Mapped[str] = mapped_column(String(128), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(64))
    shape: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Double)


class DecryptionRequestRow(Base):
    """One request to decrypt an aggregate: who asked, for what, how large."""

    __tablename__ = "decryption_requests"
    __table_args__ = (CheckConstraint("aggregate_size >= 0", name="aggregate_size"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    round_id: Mapped[str] = mapped_column(ForeignKey("rounds.id"), index=True)
    requester: Mapped[str] = mapped_column(ID)
    kind: Mapped[str] = mapped_column(String(64))
    what: Mapped[str] = mapped_column(Text)
    aggregate_size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Double)
