"""Budget queries and shared plumbing of :class:`privacy_ledger.PrivacyLedger`.

Limit, spent, reserved, remaining and the epsilon after each committed round
(whole-history accounting, :mod:`privacy_ledger.budget.accountant`), the stored events
of a budget, and noise calibration against the history
(:mod:`privacy_ledger.budget.calibration`).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from privacy_ledger.budget import accountant as acc
from privacy_ledger.budget.calibration import calibrate_for_budget
from privacy_ledger.budget.event_rows import event_of, reservation_of
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.participants import ParticipantRegistry
from privacy_ledger.budget.types import BudgetStatus, Reservation, RoundEpsilon
from privacy_ledger.errors import BudgetNotSet
from privacy_ledger.models import Budget, PrivacyEventRow

__all__ = ["BudgetQueries"]

_ZERO = Decimal(0)


class BudgetQueries(ParticipantRegistry):
    """Read side of the budget service (and the row helpers the write side shares)."""

    def _lock_budget(self, session: Session, participant_id: str, asset_id: str) -> Budget:
        stmt = (
            select(Budget)
            .where(Budget.participant_id == participant_id, Budget.asset_id == asset_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
        budget = session.execute(stmt).scalar_one_or_none()
        if budget is None:
            raise BudgetNotSet(f"participant {participant_id!r}, asset {asset_id!r}: no budget set")
        return budget

    def _rows(self, session: Session, budget: Budget, *states: str) -> list[PrivacyEventRow]:
        stmt = (
            select(PrivacyEventRow)
            .where(
                PrivacyEventRow.participant_id == budget.participant_id,
                PrivacyEventRow.asset_id == budget.asset_id,
                PrivacyEventRow.state.in_(states),
            )
            .order_by(PrivacyEventRow.resolved_at, PrivacyEventRow.created_at, PrivacyEventRow.id)
            .execution_options(populate_existing=True)
        )
        return list(session.execute(stmt).scalars())

    def _eps(self, budget: Budget, rows: Sequence[PrivacyEventRow | MechanismEvent]) -> Decimal:
        events = [r if isinstance(r, MechanismEvent) else event_of(r) for r in rows]
        return acc.epsilon(events, delta=budget.delta, accountant=budget.accountant)

    def _totals(
        self, budget: Budget, committed: list[PrivacyEventRow], reserved: list[PrivacyEventRow]
    ) -> tuple[Decimal, Decimal]:
        spent = self._eps(budget, committed)
        if not reserved:
            return spent, _ZERO
        return spent, self._eps(budget, [*committed, *reserved]) - spent

    @staticmethod
    def _subject(row: PrivacyEventRow | Budget) -> str:
        return f"participant:{row.participant_id}/asset:{row.asset_id}"

    def budget_status(self, participant_id: str, asset_id: str) -> BudgetStatus:
        """Limit, spent, reserved, remaining and epsilon after each committed round.

        Raises
        ------
        BudgetNotSet
            When no budget is set for this participant and asset.
        """
        with self._sessions() as session:
            budget = self._get_budget(session, participant_id, asset_id)
            committed = self._rows(session, budget, "committed")
            reserved = self._rows(session, budget, "reserved")
        spent, held = self._totals(budget, committed, reserved)
        limit = Decimal(budget.epsilon_limit)
        per_round = [
            RoundEpsilon(round_id, self._eps(budget, committed[: last + 1]))
            for round_id, last in acc.round_ends(r.round_id for r in committed)
        ]
        return BudgetStatus(
            participant_id=participant_id,
            asset_id=asset_id,
            accountant=budget.accountant,
            delta=budget.delta,
            limit=limit,
            spent=spent,
            reserved=held,
            remaining=max(_ZERO, limit - spent - held),
            active_reservations=len(reserved),
            per_round=per_round,
        )

    def budget_assets(self, participant_id: str) -> list[str]:
        """Return the asset ids of ``participant_id`` that have a budget, sorted.

        Raises
        ------
        ParticipantUnknown
            When the participant is not registered.
        """
        with self._sessions() as session:
            self._require_participant(session, participant_id)
            return list(
                session.execute(
                    select(Budget.asset_id)
                    .where(Budget.participant_id == participant_id)
                    .order_by(Budget.asset_id)
                ).scalars()
            )

    def epsilon_spent(self, participant_id: str, asset_id: str) -> Decimal:
        """Epsilon of the committed history (rounded up)."""
        with self._sessions() as session:
            budget = self._get_budget(session, participant_id, asset_id)
            committed = self._rows(session, budget, "committed")
        return self._eps(budget, committed)

    def events(
        self, participant_id: str, asset_id: str, *, states: Sequence[str] | None = None
    ) -> list[Reservation]:
        """Return the stored privacy events of one budget (all states unless ``states``).

        A restarted participant finds its unresolved work with
        ``states=("reserved",)`` and resumes it by id.
        """
        wanted = (
            tuple(states) if states is not None else ("reserved", "committed", "aborted", "expired")
        )
        with self._sessions() as session:
            budget = self._get_budget(session, participant_id, asset_id)
            rows = self._rows(session, budget, *wanted)
        return sorted((reservation_of(r) for r in rows), key=lambda r: (r.created_at, r.id))

    def _get_budget(self, session: Session, participant_id: str, asset_id: str) -> Budget:
        budget = session.get(Budget, (participant_id, asset_id))
        if budget is None:
            raise BudgetNotSet(f"participant {participant_id!r}, asset {asset_id!r}: no budget set")
        return budget

    def calibrate_noise(
        self,
        participant_id: str,
        asset_id: str,
        *,
        rounds: int,
        steps_per_round: int,
        sample_rate: float,
        max_grad_norm: float,
        epsilon: str | Decimal | None = None,
    ) -> float:
        """Smallest noise multiplier keeping history + the plan within the budget.

        Unlike Opacus' ``make_private_with_epsilon`` (empty history), this
        composes the participant's committed and reserved events with
        ``rounds * steps_per_round`` planned steps
        (:func:`~privacy_ledger.budget.calibration.calibrate_for_budget`).

        Parameters
        ----------
        rounds, steps_per_round, sample_rate, max_grad_norm
            The plan (Poisson sampling at ``sample_rate``).
        epsilon
            Extra epsilon the plan may add on top of the current history; capped
            by the remaining budget. ``None`` uses the whole remaining budget.

        Returns
        -------
        float
            Noise multiplier that fits (feasible side of a 0.1 % bisection).

        Raises
        ------
        CalibrationImpossible
            When even a very large noise multiplier does not fit.
        """
        with self._sessions() as session:
            budget = self._get_budget(session, participant_id, asset_id)
            history = self._rows(session, budget, "committed", "reserved")
        return calibrate_for_budget(
            [event_of(r) for r in history],
            limit=Decimal(budget.epsilon_limit),
            extra=epsilon,
            delta=budget.delta,
            accountant=budget.accountant,
            rounds=rounds,
            steps_per_round=steps_per_round,
            sample_rate=sample_rate,
            max_grad_norm=max_grad_norm,
        )
