"""The privacy-budget service: check, reserve, then commit.

A request states its planned mechanism event. The ledger locks the budget row
(PostgreSQL ``SELECT ... FOR UPDATE``; SQLite ``BEGIN IMMEDIATE``), recomputes
epsilon over committed + active reservations + the request with the budget's
accountant (:mod:`privacy_ledger.budget.accountant`), and either records a
reservation or refuses with :class:`~privacy_ledger.errors.BudgetExceeded`,
recording nothing as spent. Refuse-before-running follows OpenDP's odometers
and Tumult's ``InsufficientBudgetError``: a mechanism whose cost would break
the budget never runs (``docs/audit/ledger.md``).

Every change (budget set, reservation, commit, abort, expiry, refusal) writes
an audit event through :class:`~privacy_ledger.budget.types.AuditAppender` in the
*same transaction* as the row change.

Protocol for callers: reserve, run the mechanism, ``commit``, and only then
release anything derived from it. A crash before ``commit`` released nothing,
so expiring the reservation loses no charge; ``commit`` is idempotent, so a
restarted caller that resumes by reservation id never charges twice. A
caller that may lose the answer to ``reserve`` (a remote client) names the
request with a ``request_id``: the reservation's id is derived from it, so the
retried request finds the reservation it already made instead of holding the
budget twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from privacy_ledger.budget import accountant as acc
from privacy_ledger.budget.event_rows import (
    audit_value,
    event_fields,
    event_of,
    new_row,
    request_reservation_id,
    reservation_of,
)
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.participants import check_id
from privacy_ledger.budget.queries import BudgetQueries
from privacy_ledger.budget.types import AuditAppender, Reservation
from privacy_ledger.db import create_ledger_engine, current_revision, head_revision, upgrade
from privacy_ledger.errors import (
    BudgetExceeded,
    LedgerError,
    LedgerParameterInvalid,
    ParticipantSuspended,
    ReservationConflict,
    ReservationExpired,
    ReservationNotActive,
    ReservationUnknown,
    SchemaOutdated,
)
from privacy_ledger.models import Budget, Participant, PrivacyEventRow

__all__ = ["PrivacyLedger"]

logger = logging.getLogger(__name__)


class PrivacyLedger(BudgetQueries):
    """Epsilon budgets per participant and data asset that cannot be overspent.

    Parameters
    ----------
    engine
        Engine from :func:`privacy_ledger.db.create_ledger_engine`, schema
        already migrated (see :meth:`from_url`).
    audit
        Audit sink written in the same transaction as every budget change;
        ``None`` writes no audit entries (tests of the budget logic only).
    clock
        Source of epoch seconds (injectable for expiry tests).
    """

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        audit: AuditAppender | None = None,
        create: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> PrivacyLedger:
        """Open the ledger at ``url``, running the migrations first when ``create``.

        Raises
        ------
        DatabaseUrlInvalid
            When ``url`` names an unsupported backend.
        SchemaOutdated
            With ``create=False``, when the schema is not at the newest revision.
        """
        engine = create_ledger_engine(url)
        if create:
            upgrade(engine)
        else:
            found, wanted = current_revision(engine), head_revision()
            if found != wanted:
                engine.dispose()
                raise SchemaOutdated(
                    f"url: database at revision {found!r}, code needs "
                    f"{wanted!r}; open it with create=True to migrate"
                )
        return cls(engine, audit=audit, clock=clock)

    def _expire_locked(self, session: Session, budget: Budget, now: float) -> int:
        rows = [r for r in self._rows(session, budget, "reserved") if r.expires_at <= now]
        for row in rows:
            row.state, row.resolved_at = "expired", now
            self._emit(
                session,
                "budget.expired",
                self._subject(row),
                {
                    "reservation": row.id,
                    "round": row.round_id,
                    "expires_at": audit_value(row.expires_at),
                    "epsilon_projected": Decimal(row.epsilon_projected),
                },
            )
            logger.info("reservation %s expired (nothing released)", row.id)
        if rows:
            budget.version += 1
        return len(rows)

    def _load_for_update(
        self, session: Session, reservation_id: str
    ) -> tuple[PrivacyEventRow, Budget]:
        if not isinstance(reservation_id, str) or not reservation_id:
            raise LedgerParameterInvalid("reservation_id: must be a non-empty string")
        key = session.execute(
            select(PrivacyEventRow.participant_id, PrivacyEventRow.asset_id).where(
                PrivacyEventRow.id == reservation_id
            )
        ).one_or_none()
        if key is None:
            raise ReservationUnknown(f"reservation_id: {reservation_id!r} does not exist")
        budget = self._lock_budget(session, key[0], key[1])
        row = session.execute(
            select(PrivacyEventRow)
            .where(PrivacyEventRow.id == reservation_id)
            .execution_options(populate_existing=True)
        ).scalar_one()
        return row, budget

    # -- budgets ----------------------------------------------------------------

    def set_budget(
        self,
        participant_id: str,
        asset_id: str,
        *,
        epsilon: str | Decimal,
        delta: float,
        accountant: str = "rdp",
    ) -> None:
        """Create or change the (epsilon, delta) budget of one participant's asset.

        Parameters
        ----------
        participant_id, asset_id
            A registered data asset.
        epsilon
            Limit as an exact decimal (``str`` or ``Decimal``; floats are refused).
        delta
            Target delta, in (0, 1); epsilon is computed at this delta.
        accountant
            ``rdp`` (default) or ``prv``; ``gdp`` is refused.

        Raises
        ------
        AssetUnknown, LedgerParameterInvalid, AccountantNotAllowed
        """
        limit = acc.parse_epsilon(epsilon)
        if isinstance(delta, bool) or not isinstance(delta, int | float) or not 0 < delta < 1:
            raise LedgerParameterInvalid(f"delta: must be a float in (0, 1), got {delta!r}")
        acc.check_accountant(accountant)
        now = self._clock()
        with self._transaction() as session:
            self._require_asset(session, participant_id, asset_id)
            budget = session.execute(
                select(Budget)
                .where(Budget.participant_id == participant_id, Budget.asset_id == asset_id)
                .with_for_update()
            ).scalar_one_or_none()
            previous = None if budget is None else budget.epsilon_limit
            if budget is None:
                budget = Budget(
                    participant_id=participant_id,
                    asset_id=asset_id,
                    version=0,
                    created_at=now,
                    epsilon_limit="0",
                    delta=0.5,
                    accountant="rdp",
                )
                session.add(budget)
            budget.epsilon_limit, budget.delta = format(limit, "f"), float(delta)
            budget.accountant, budget.updated_at = accountant, now
            budget.version += 1
            self._emit(
                session,
                "budget.set",
                self._subject(budget),
                {
                    "epsilon_limit": limit,
                    "delta": audit_value(delta),
                    "accountant": accountant,
                    "previous_limit": None if previous is None else Decimal(previous),
                },
            )

    def reserve(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        *,
        round_id: str | None = None,
        ttl_seconds: float = 3600,
        request_id: str | None = None,
    ) -> Reservation:
        """Reserve the epsilon of a planned mechanism event, or refuse.

        Parameters
        ----------
        participant_id, asset_id
            Whose budget pays.
        event
            The planned mechanism (noise multiplier, sample rate, steps, ...).
        round_id
            Federation round the event belongs to (shown in per-round history).
        ttl_seconds
            The reservation expires (and is released) after this many seconds
            unless committed first.
        request_id
            Caller-chosen id of this request (16-128 characters of
            ``[A-Za-z0-9_-]``, random per planned mechanism): the reservation's
            id is derived from it, budget and asset, so repeating the request
            (after a lost answer) returns the reservation already made, in its
            current state, and holds nothing more.

        Returns
        -------
        Reservation
            The active reservation; pass its ``id`` to :meth:`commit` or :meth:`abort`.

        Raises
        ------
        BudgetExceeded
            When epsilon(committed + reserved + event) exceeds the limit; the
            refusal is audited and nothing is recorded as spent.
        ReservationConflict
            ``request_id`` was already used with another round or mechanism.
        BudgetNotSet, ParticipantSuspended, LedgerParameterInvalid
        """
        if not isinstance(event, MechanismEvent):
            raise LedgerParameterInvalid(f"event: expected a MechanismEvent, got {event!r}")
        if round_id is not None:
            check_id("round_id", round_id)
        if (
            isinstance(ttl_seconds, bool)
            or not isinstance(ttl_seconds, int | float)
            or not (0 < ttl_seconds < 1e9)
        ):
            raise LedgerParameterInvalid(f"ttl_seconds: must be > 0, got {ttl_seconds!r}")
        wanted = None
        if request_id is not None:
            wanted = request_reservation_id(participant_id, asset_id, request_id)
        now = self._clock()
        with self._transaction() as session:
            budget = self._lock_budget(session, participant_id, asset_id)
            if wanted is not None and (done := session.get(PrivacyEventRow, wanted)) is not None:
                return self._replayed(done, event, round_id)
            participant = session.get(Participant, participant_id)
            if participant is not None and participant.status != "active":
                self._emit(
                    session,
                    "budget.refused",
                    self._subject(budget),
                    {"round": round_id, "reason": "participant suspended", **event_fields(event)},
                )
                outcome: Reservation | LedgerError = ParticipantSuspended(
                    f"participant {participant_id!r} is suspended"
                )
            else:
                outcome = self._reserve_locked(
                    session, budget, event, round_id, now, ttl_seconds, wanted
                )
        if isinstance(outcome, LedgerError):  # refusals commit their audit entry, then raise
            logger.info("refused: %s", outcome.message)
            raise outcome
        return outcome

    @staticmethod
    def _replayed(row: PrivacyEventRow, event: MechanismEvent, round_id: str | None) -> Reservation:
        if row.round_id != round_id or event_of(row) != event:
            raise ReservationConflict(
                f"request_id: already used for reservation {row.id!r} of round "
                f"{row.round_id!r} with another mechanism or round; choose a new request id"
            )
        logger.info("reserve replayed: reservation %s (%s)", row.id, row.state)
        return reservation_of(row)

    def _reserve_locked(
        self,
        session: Session,
        budget: Budget,
        event: MechanismEvent,
        round_id: str | None,
        now: float,
        ttl_seconds: float,
        reservation_id: str | None = None,
    ) -> Reservation | BudgetExceeded:
        self._expire_locked(session, budget, now)
        committed = self._rows(session, budget, "committed")
        reserved = self._rows(session, budget, "reserved")
        spent, held = self._totals(budget, committed, reserved)
        projected = self._eps(budget, [*committed, *reserved, event])
        limit = Decimal(budget.epsilon_limit)
        fields: dict[str, Any] = {
            "round": round_id,
            "limit": limit,
            "spent": spent,
            "reserved": held,
            "epsilon_projected": audit_value(projected),
            **event_fields(event),
        }
        if projected > limit:
            requested = projected - spent - held
            self._emit(session, "budget.refused", self._subject(budget), fields)
            return BudgetExceeded(
                f"participant {budget.participant_id!r}, asset {budget.asset_id!r}: projected "
                f"epsilon {projected} exceeds limit {limit} (spent {spent}, reserved {held}, "
                f"requested {requested})",
                limit=limit,
                spent=spent,
                reserved=held,
                requested=requested,
            )
        row = new_row(budget, event, round_id, projected, now, ttl_seconds, reservation_id)
        session.add(row)
        budget.version += 1
        session.flush()
        self._emit(
            session, "budget.reserved", self._subject(budget), {"reservation": row.id, **fields}
        )
        return reservation_of(row)

    # -- resolution -------------------------------------------------------------

    def commit(self, reservation_id: str) -> None:
        """Mark a reservation spent. Idempotent: committing twice charges once.

        Commit *before* releasing anything derived from the mechanism. A
        reservation that already expired is revived if its epsilon still fits.

        Raises
        ------
        ReservationUnknown
            When no reservation has this id.
        ReservationNotActive
            When the reservation was aborted.
        ReservationExpired
            When it expired and no longer fits the budget (release nothing; the
            refusal is audited).
        """
        self._resolve(reservation_id, released_anything=None)

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Release a reservation, unless something derived from it was released.

        Parameters
        ----------
        reservation_id
            Id returned by :meth:`reserve`.
        released_anything
            ``True`` if any output derived from the mechanism left the
            participant: the reservation is then *committed* instead (no lost
            charge), even if it had expired or exceeds the limit by now (the
            audit entry says ``over_limit``).

        Raises
        ------
        ReservationUnknown
            When no reservation has this id.
        ReservationNotActive
            When ``released_anything`` is false but the reservation is already
            committed (a committed charge is never refunded).
        """
        if not isinstance(released_anything, bool):
            raise LedgerParameterInvalid("released_anything: must be a bool")
        self._resolve(reservation_id, released_anything=released_anything)

    def _resolve(self, reservation_id: str, *, released_anything: bool | None) -> None:
        now = self._clock()
        refusal: ReservationExpired | None = None
        with self._transaction() as session:
            row, budget = self._load_for_update(session, reservation_id)
            subject = self._subject(row)
            base = {"reservation": row.id, "round": row.round_id, "previous_state": row.state}
            if released_anything is False:
                if row.state in ("aborted", "expired"):
                    return
                if row.state == "committed":
                    raise ReservationNotActive(
                        f"reservation {row.id!r} is committed; a committed charge is never refunded"
                    )
                row.state, row.resolved_at, row.released_anything = "aborted", now, False
                budget.version += 1
                self._emit(session, "budget.aborted", subject, base)
                return
            if row.state == "committed":
                return
            if row.state == "aborted" and released_anything is None:
                raise ReservationNotActive(f"reservation {row.id!r} was aborted; reserve again")
            over_limit = False
            if row.state != "reserved":
                committed = self._rows(session, budget, "committed")
                reserved = self._rows(session, budget, "reserved")
                projected = self._eps(budget, [*committed, *reserved, row])
                over_limit = projected > Decimal(budget.epsilon_limit)
                if over_limit and released_anything is None:
                    refusal = ReservationExpired(
                        f"reservation {row.id!r} expired and no longer fits: projected "
                        f"epsilon {projected} > limit {budget.epsilon_limit}; release nothing"
                    )
                    self._emit(
                        session,
                        "budget.refused",
                        subject,
                        {
                            **base,
                            "epsilon_projected": audit_value(projected),
                            "limit": Decimal(budget.epsilon_limit),
                        },
                    )
            if refusal is None:
                row.state, row.resolved_at = "committed", now
                row.released_anything = bool(released_anything)
                budget.version += 1
                self._emit(
                    session,
                    "budget.committed",
                    subject,
                    {**base, "after_release": bool(released_anything), "over_limit": over_limit},
                )
                if over_limit:
                    logger.warning("reservation %s committed over the limit after release", row.id)
        if refusal is not None:
            raise refusal

    def expire_reservations(self, now: float | None = None) -> int:
        """Expire every reservation past its deadline; return how many were expired.

        Run it at start-up (crash recovery) and periodically. Expired
        reservations stop counting against the budget; :meth:`commit` can
        still revive one if its epsilon fits.
        """
        at = self._clock() if now is None else float(now)
        with self._sessions() as session:
            keys = session.execute(
                select(PrivacyEventRow.participant_id, PrivacyEventRow.asset_id)
                .where(PrivacyEventRow.state == "reserved", PrivacyEventRow.expires_at <= at)
                .distinct()
            ).all()
        expired = 0
        for participant_id, asset_id in keys:
            with self._transaction() as session:
                budget = self._lock_budget(session, participant_id, asset_id)
                expired += self._expire_locked(session, budget, at)
        return expired
