"""Round-state repository: persistent rounds, upload evidence and decryption requests.

The round protocol (``secure_fed``) is an explicit state machine; this
repository stores its stage and JSON state so an aggregator restarts where
it stopped, and keeps the evidence a compliance report needs
(docs/architecture.md): every payload that left a participant (kind, shape, size, digest;
never the data) and every decryption request. Stage transitions are checked
by the protocol, not here; ``save`` with ``expected_stage`` gives
compare-and-set semantics so two writers cannot both advance a round.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import sessionmaker

from privacy_ledger.audit.rows import check_row, row_key
from privacy_ledger.budget.participants import check_id
from privacy_ledger.errors import LedgerParameterInvalid, RoundUnknown, RowAltered
from privacy_ledger.models import DecryptionRequestRow, RoundRow, UploadRow

__all__ = ["RoundStore", "RoundRecord", "UploadRecord", "DecryptionRecord"]

_DIGEST_CHARS = set("0123456789abcdef")


@dataclass(frozen=True, kw_only=True)
class RoundRecord:
    """Stored round: id, stage constant, JSON state and epoch-second timestamps."""

    id: str
    stage: str
    state: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(frozen=True, kw_only=True)
class UploadRecord:
    """Evidence of one upload: who, which round, digest (hex), size, kind and shape."""

    round_id: str
    participant_id: str
    digest: str
    size: int
    kind: str
    shape: list[Any]
    created_at: float


@dataclass(frozen=True, kw_only=True)
class DecryptionRecord:
    """One decryption request: requester, kind, what was decrypted, aggregate size."""

    round_id: str
    requester: str
    kind: str
    what: str
    aggregate_size: int
    created_at: float


def _check_size(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LedgerParameterInvalid(f"{name}: must be an int >= 0, got {value!r}")
    return value


def _check_label(name: str, value: object, limit: int = 64) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise LedgerParameterInvalid(f"{name}: must be a string of 1-{limit} characters")
    return value


class RoundStore:
    """Rounds, uploads and decryption requests in the ledger database.

    Parameters
    ----------
    engine
        Migrated ledger engine (``PrivacyLedger.engine``).
    clock
        Source of epoch seconds.
    """

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.time) -> None:
        if not isinstance(engine, Engine):
            raise LedgerParameterInvalid(f"engine: expected a SQLAlchemy Engine, got {engine!r}")
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._clock = clock

    def save(
        self,
        round_id: str,
        *,
        stage: str,
        state: Mapping[str, Any],
        expected_stage: str | None = None,
    ) -> None:
        """Create a round or update its stage and state.

        Parameters
        ----------
        expected_stage
            If given, the update happens only if the stored stage equals it.

        Raises
        ------
        RoundUnknown
            When ``expected_stage`` is given but the round does not exist or
            has another stage (a concurrent writer advanced it).
        """
        check_id("round_id", round_id)
        _check_label("stage", stage)
        now = self._clock()
        with self._sessions() as session, session.begin():
            row = session.get(RoundRow, round_id, with_for_update=True)
            if expected_stage is not None and (row is None or row.stage != expected_stage):
                found = None if row is None else row.stage
                raise RoundUnknown(
                    f"round {round_id!r}: expected stage {expected_stage!r}, found {found!r}"
                )
            if row is None:
                session.add(
                    RoundRow(
                        id=round_id, stage=stage, state=dict(state), created_at=now, updated_at=now
                    )
                )
            else:  # through the ORM, so the ledger seal records the change (audit.rows)
                row.stage, row.state, row.updated_at = stage, dict(state), now

    def load(self, round_id: str) -> RoundRecord:
        """Return the stored round.

        Raises
        ------
        RoundUnknown
            When no round has this id.
        RowAltered
            ``LEDGER_ROW_ALTERED`` when the stored row differs from what the ledger
            recorded writing (:func:`privacy_ledger.audit.rows.check_row`).
        """
        with self._sessions() as session:
            try:
                row = session.get(RoundRow, round_id)
            except ValueError:  # the stored state is no longer JSON: name what changed
                check_row(session, "rounds", row_key([round_id]))
                raise RowAltered(
                    f"table rounds, row {row_key([round_id])}, column state: not readable JSON",
                    table="rounds",
                    row_key=row_key([round_id]),
                    column="state",
                ) from None
            if row is None:
                raise RoundUnknown(f"round_id: {round_id!r} is not stored")
            check_row(session, "rounds", row_key([round_id]))
            return RoundRecord(
                id=row.id,
                stage=row.stage,
                state=dict(row.state),
                created_at=row.created_at,
                updated_at=row.updated_at,
            )

    def record_upload(
        self,
        round_id: str,
        participant_id: str,
        *,
        digest: str,
        size: int,
        kind: str,
        shape: Sequence[int],
    ) -> None:
        """Store evidence of an upload (hex digest, byte size, kind, tensor shape)."""
        digest = digest.lower() if isinstance(digest, str) else digest
        if (
            not isinstance(digest, str)
            or not 0 < len(digest) <= 128
            or not set(digest) <= _DIGEST_CHARS
        ):
            raise LedgerParameterInvalid("digest: must be 1-128 hex characters")
        _check_size("size", size)
        _check_label("kind", kind)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise LedgerParameterInvalid(f"shape: must be non-negative ints, got {shape!r}")
        row = UploadRow(
            round_id=round_id,
            participant_id=participant_id,
            digest=digest,
            size=size,
            kind=kind,
            shape=list(shape),
            created_at=self._clock(),
        )
        self._add_to_round(round_id, row)

    def record_decryption(
        self, round_id: str, *, requester: str, kind: str, what: str, aggregate_size: int
    ) -> None:
        """Store one decryption request (who asked to decrypt what, and how large)."""
        check_id("requester", requester)
        _check_label("kind", kind)
        _check_label("what", what, 2000)
        _check_size("aggregate_size", aggregate_size)
        row = DecryptionRequestRow(
            round_id=round_id,
            requester=requester,
            kind=kind,
            what=what,
            aggregate_size=aggregate_size,
            created_at=self._clock(),
        )
        self._add_to_round(round_id, row)

    def rounds_with_upload(self, digest: str, prefix: str = "") -> list[str]:
        """Return the ids (starting with ``prefix``) of the rounds that recorded this digest."""
        digest = digest.lower() if isinstance(digest, str) else digest
        with self._sessions() as session:
            rows = session.execute(
                select(UploadRow.round_id)
                .where(UploadRow.digest == digest, UploadRow.round_id.startswith(prefix))
                .distinct()
            ).scalars()
            return sorted(rows)

    def uploads(self, round_id: str) -> list[UploadRecord]:
        """Return the uploads of a round, in arrival order."""
        with self._sessions() as session:
            rows = session.execute(
                select(UploadRow).where(UploadRow.round_id == round_id).order_by(UploadRow.id)
            ).scalars()
            return [
                UploadRecord(
                    round_id=r.round_id,
                    participant_id=r.participant_id,
                    digest=r.digest,
                    size=r.size,
                    kind=r.kind,
                    shape=list(r.shape),
                    created_at=r.created_at,
                )
                for r in rows
            ]

    def decryptions(self, round_id: str) -> list[DecryptionRecord]:
        """Return the decryption requests of a round, in arrival order."""
        with self._sessions() as session:
            rows = session.execute(
                select(DecryptionRequestRow)
                .where(DecryptionRequestRow.round_id == round_id)
                .order_by(DecryptionRequestRow.id)
            )
            return [
                DecryptionRecord(
                    round_id=r.round_id,
                    requester=r.requester,
                    kind=r.kind,
                    what=r.what,
                    aggregate_size=r.aggregate_size,
                    created_at=r.created_at,
                )
                for r in rows.scalars()
            ]

    def _add_to_round(self, round_id: str, row: UploadRow | DecryptionRequestRow) -> None:
        """Store ``row`` in one transaction, refusing a round that is not stored."""
        with self._sessions() as session, session.begin():
            self._require_round(session, round_id)
            session.add(row)

    @staticmethod
    def _require_round(session: Any, round_id: str) -> None:
        if session.get(RoundRow, round_id) is None:
            raise RoundUnknown(f"round_id: {round_id!r} is not stored")
