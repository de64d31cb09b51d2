"""Participants and their data assets: who may hold a privacy budget.

Base of :class:`privacy_ledger.PrivacyLedger`: it holds the engine, the
session factory, the clock and the audit sink, and validates identifiers
(epsilon limits are parsed by :func:`privacy_ledger.budget.accountant.parse_epsilon`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from privacy_ledger.budget.types import AuditAppender
from privacy_ledger.errors import (
    AssetUnknown,
    LedgerParameterInvalid,
    ParticipantConflict,
    ParticipantUnknown,
)
from privacy_ledger.models import PARTICIPANT_KINDS, PARTICIPANT_STATUSES, DataAsset, Participant

__all__ = ["ParticipantRegistry", "check_id", "MAX_PUBLIC_KEY_PEM"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
#: Largest accepted SM2 public key PEM (untrusted bytes are size-checked first).
MAX_PUBLIC_KEY_PEM = 4096


def check_id(name: str, value: object) -> str:
    """Return ``value`` if it is a valid identifier (1-128 chars, ``[A-Za-z0-9._:@-]``).

    Raises
    ------
    LedgerParameterInvalid
        Naming the parameter ``name``.
    """
    if not isinstance(value, str) or not _ID.match(value):
        raise LedgerParameterInvalid(
            f"{name}: {value!r} must be 1-128 characters of letters, digits, '._:@-'"
        )
    return value


class ParticipantRegistry:
    """Participants and data assets; base class of the budget service."""

    def __init__(
        self,
        engine: Engine,
        *,
        audit: AuditAppender | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(engine, Engine):
            raise LedgerParameterInvalid(f"engine: expected a SQLAlchemy Engine, got {engine!r}")
        if not callable(clock):
            raise LedgerParameterInvalid("clock: must be a callable returning epoch seconds")
        self.engine = engine
        self._audit = audit
        self._clock = clock
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        cover = getattr(audit, "cover", None)
        if callable(cover):  # an AuditLog also seals the rows written on this engine
            cover(engine)

    @contextmanager
    def _transaction(self) -> Iterator[Session]:
        with self._sessions() as session, session.begin():
            yield session

    def _emit(self, session: Session, event: str, subject: str, fields: Mapping[str, Any]) -> None:
        if self._audit is not None:
            self._audit.append(session, event=event, subject=subject, fields=dict(fields))
            checkpoint = getattr(self._audit, "checkpoint", None)
            if callable(checkpoint):  # batch-signing logs sign a head when one is due
                checkpoint(session)

    def register_participant(
        self,
        participant_id: str,
        *,
        institution: str,
        kind: str,
        public_key_pem: bytes | None = None,
    ) -> None:
        """Register a participant; registering the same attributes again is a no-op.

        Parameters
        ----------
        participant_id
            Stable identifier (1-128 characters ``[A-Za-z0-9._:@-]``).
        institution
            Legal name of the institution (1-256 characters).
        kind
            ``hospital``, ``bank`` or ``other``.
        public_key_pem
            The participant's SM2 public key (PEM, at most 4 KiB), if known.

        Raises
        ------
        LedgerParameterInvalid, ParticipantConflict
        """
        check_id("participant_id", participant_id)
        if not isinstance(institution, str) or not 0 < len(institution.strip()) <= 256:
            raise LedgerParameterInvalid("institution: must be 1-256 characters")
        if kind not in PARTICIPANT_KINDS:
            raise LedgerParameterInvalid(f"kind: {kind!r} not in {PARTICIPANT_KINDS}")
        if public_key_pem is not None:
            if not isinstance(public_key_pem, bytes) or len(public_key_pem) > MAX_PUBLIC_KEY_PEM:
                raise LedgerParameterInvalid(
                    f"public_key_pem: must be bytes of at most {MAX_PUBLIC_KEY_PEM}"
                )
            if not public_key_pem.lstrip().startswith(b"-----BEGIN PUBLIC KEY-----"):
                raise LedgerParameterInvalid("public_key_pem: not a PEM 'PUBLIC KEY' block")
        with self._transaction() as session:
            known = session.get(Participant, participant_id)
            if known is None:
                session.add(
                    Participant(
                        id=participant_id,
                        institution=institution,
                        kind=kind,
                        public_key_pem=public_key_pem,
                        status="active",
                        created_at=self._clock(),
                    )
                )
            elif (known.institution, known.kind, known.public_key_pem) != (
                institution,
                kind,
                public_key_pem,
            ):
                raise ParticipantConflict(
                    f"participant_id: {participant_id!r} is registered with other attributes"
                )

    def set_participant_status(self, participant_id: str, status: str) -> None:
        """Set ``active`` or ``suspended`` (a suspended participant cannot reserve).

        Raises
        ------
        ParticipantUnknown, LedgerParameterInvalid
        """
        if status not in PARTICIPANT_STATUSES:
            raise LedgerParameterInvalid(f"status: {status!r} not in {PARTICIPANT_STATUSES}")
        with self._transaction() as session:
            self._require_participant(session, participant_id).status = status

    def register_asset(self, participant_id: str, asset_id: str, *, description: str = "") -> None:
        """Register a data asset of a participant (idempotent).

        Raises
        ------
        ParticipantUnknown, LedgerParameterInvalid
        """
        check_id("asset_id", asset_id)
        if not isinstance(description, str) or len(description) > 2000:
            raise LedgerParameterInvalid("description: must be a string of <= 2000 characters")
        with self._transaction() as session:
            self._require_participant(session, participant_id)
            if session.get(DataAsset, (participant_id, asset_id)) is None:
                session.add(
                    DataAsset(
                        participant_id=participant_id,
                        asset_id=asset_id,
                        description=description,
                        created_at=self._clock(),
                    )
                )

    def _require_participant(self, session: Session, participant_id: str) -> Participant:
        check_id("participant_id", participant_id)
        participant = session.get(Participant, participant_id)
        if participant is None:
            raise ParticipantUnknown(f"participant_id: {participant_id!r} is not registered")
        return participant

    def _require_asset(self, session: Session, participant_id: str, asset_id: str) -> DataAsset:
        self._require_participant(session, participant_id)
        asset = session.get(DataAsset, (participant_id, asset_id))
        if asset is None:
            raise AssetUnknown(
                f"asset_id: participant {participant_id!r} has no asset {asset_id!r}"
            )
        return asset
