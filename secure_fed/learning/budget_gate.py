"""The budget interface private training asks before it touches private data.

Refuse before running, charge on success, refund on failure (as OpenDP's
filters and Tumult's ``InsufficientBudgetError``: a mechanism whose cost would
break the budget never runs). A participant *reserves* the mechanism it is
about to run (a :class:`~privacy_ledger.budget.mechanism.MechanismEvent`), runs
it, then *commits*; on failure it *aborts* and nothing is charged unless
something was released. Epsilon is always recomputed from the whole mechanism
history, never summed per round (composition is sub-additive; see
``docs/audit/ledger.md``).

:class:`BudgetGate` is the small interface the learning code depends on (the
``Protocol`` of the layering rule (docs/architecture.md), defined once in
:mod:`privacy_ledger.budget.types` and re-exported here);
``privacy_ledger.PrivacyLedger`` implements it with a database and audit log.
:class:`InMemoryBudgetGate` is a real, complete in-process implementation for
baselines, tests and benchmarks: the ledger's accountant
(:func:`privacy_ledger.budget.accountant.epsilon`), the ledger's calibration
(:func:`privacy_ledger.budget.calibration.calibrate_for_budget`), the ledger's
:class:`~privacy_ledger.budget.types.Reservation` and resolution rules, no
persistence and no expiry.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from decimal import Decimal

from privacy_ledger.budget import accountant as acc
from privacy_ledger.budget.calibration import calibrate_for_budget
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.types import BudgetGate, Reservation
from privacy_ledger.errors import (
    AccountantNotAllowed,
    BudgetExceeded,
    CalibrationImpossible,
    LedgerParameterInvalid,
    ParticipantSuspended,
    ReservationNotActive,
    ReservationUnknown,
)
from secure_fed.errors import BudgetRefused, LearningParameterInvalid

__all__ = ["BudgetGate", "InMemoryBudgetGate", "refusal_errors"]

logger = logging.getLogger(__name__)

_STATES = ("reserved", "committed", "aborted")


def refusal_errors() -> tuple[type[Exception], ...]:
    """Exception types meaning "the budget refused; nothing was spent".

    :class:`~secure_fed.errors.BudgetRefused` (in-memory gate) and the
    ledger's ``BudgetExceeded``, ``CalibrationImpossible`` (both gates) and
    ``ParticipantSuspended``. Other errors (no budget set, invalid plans,
    database failures) are configuration or infrastructure faults and propagate.
    """
    return (BudgetRefused, BudgetExceeded, CalibrationImpossible, ParticipantSuspended)


class InMemoryBudgetGate:
    """In-process :class:`BudgetGate` with per-(participant, asset) epsilon budgets.

    Parameters
    ----------
    epsilon
        Default epsilon budget of every (participant, asset) pair (> 0). A
        float is taken at its shortest decimal ``repr`` (``8.0`` is ``8.0``).
    delta
        Delta at which budgets are enforced (0 < delta < 1).
    accountant
        ``rdp`` (default) or ``prv``, as for a ledger budget.

    Raises
    ------
    LearningParameterInvalid
        ``epsilon``, ``delta`` or ``accountant`` out of range (named).

    Notes
    -----
    Held reservations count against the budget until committed or aborted, so
    two concurrent reservations cannot both slip under it. Epsilons are the
    ledger's: rounded up, so comparisons never underestimate. Resolution
    follows the ledger: ``commit`` is idempotent, aborting an aborted
    reservation is a no-op, committing an aborted one or aborting (without
    release) a committed one raises ``ReservationNotActive``.
    """

    def __init__(
        self, *, epsilon: float | str | Decimal, delta: float, accountant: str = "rdp"
    ) -> None:
        if not (isinstance(delta, int | float) and 0 < delta < 1):
            raise LearningParameterInvalid(f"delta must be in (0, 1), got {delta!r}")
        try:
            acc.check_accountant(accountant)
        except AccountantNotAllowed as exc:
            raise LearningParameterInvalid(f"accountant: {exc.message}") from None
        self.default_epsilon = _limit(epsilon)
        self.delta, self.accountant = float(delta), accountant
        self._budgets: dict[tuple[str, str], Decimal] = {}
        self._events: dict[str, Reservation] = {}
        self._lock = threading.Lock()

    def set_budget(
        self, participant_id: str, asset_id: str, *, epsilon: float | str | Decimal
    ) -> None:
        """Give one (participant, asset) pair its own epsilon budget."""
        self._budgets[(participant_id, asset_id)] = _limit(epsilon)

    def budget(self, participant_id: str, asset_id: str) -> Decimal:
        """Epsilon budget of a (participant, asset) pair."""
        return self._budgets.get((participant_id, asset_id), self.default_epsilon)

    def events(
        self, participant_id: str, asset_id: str, *, states: Sequence[str] | None = None
    ) -> list[Reservation]:
        """Reservations of one budget in the given states (all unless ``states``), oldest first."""
        with self._lock:
            return self._select(participant_id, asset_id, _STATES if states is None else states)

    def _select(
        self, participant_id: str, asset_id: str, states: Sequence[str]
    ) -> list[Reservation]:
        key = (participant_id, asset_id)
        return [
            r
            for r in self._events.values()
            if (r.participant_id, r.asset_id) == key and r.state in states
        ]

    def epsilon_spent(self, participant_id: str, asset_id: str) -> Decimal:
        """Epsilon of the committed history (the ledger's accountant, rounded up)."""
        return self._epsilon(
            e.event for e in self.events(participant_id, asset_id, states=("committed",))
        )

    def reserve(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        *,
        round_id: str | None = None,
    ) -> Reservation:
        """Hold budget for ``event``.

        Returns
        -------
        Reservation
            State ``reserved``; it never expires (``expires_at`` is infinite).

        Raises
        ------
        BudgetRefused
            History (committed and held) plus ``event`` would exceed the budget.
        """
        if not isinstance(event, MechanismEvent):
            raise LearningParameterInvalid(f"event: expected a MechanismEvent, got {event!r}")
        with self._lock:  # the check and the hold are atomic
            history = self._select(participant_id, asset_id, ("committed", "reserved"))
            return self._reserve_locked(participant_id, asset_id, event, round_id, history)

    def _reserve_locked(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        round_id: str | None,
        history: list[Reservation],
    ) -> Reservation:
        projected = self._epsilon([*(r.event for r in history), event])
        limit = self.budget(participant_id, asset_id)
        if projected > limit:
            raise BudgetRefused(
                f"reservation refused for participant {participant_id!r}, asset "
                f"{asset_id!r}: epsilon would reach {projected} > budget {limit} "
                f"at delta {self.delta:g}; nothing was spent"
            )
        reservation = Reservation(
            id=secrets.token_hex(16),
            participant_id=participant_id,
            asset_id=asset_id,
            round_id=round_id,
            event=event,
            state="reserved",
            epsilon_projected=projected,
            created_at=time.time(),
            expires_at=math.inf,
        )
        self._events[reservation.id] = reservation
        logger.info(
            "reserved %s for %s/%s (round %s): epsilon would be %s of %s",
            reservation.id,
            participant_id,
            asset_id,
            round_id,
            projected,
            limit,
        )
        return reservation

    def commit(self, reservation_id: str) -> None:
        """Charge a held reservation (the mechanism ran). Idempotent.

        Raises
        ------
        ReservationUnknown
            No reservation has this id.
        ReservationNotActive
            The reservation was aborted.
        """
        with self._lock:
            reservation = self._get(reservation_id)
            if reservation.state == "aborted":
                raise ReservationNotActive(
                    f"reservation {reservation_id!r} was aborted; reserve again"
                )
            self._resolve(reservation, "committed")

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Release a held reservation; commit it instead when something was released.

        Raises
        ------
        ReservationUnknown
            No reservation has this id.
        ReservationNotActive
            ``released_anything`` is false but the reservation is committed (a
            committed charge is never refunded).
        """
        with self._lock:
            reservation = self._get(reservation_id)
            if released_anything:
                if reservation.state != "committed":
                    self._resolve(reservation, "committed")
                return
            if reservation.state == "committed":
                raise ReservationNotActive(
                    f"reservation {reservation_id!r} is committed; a committed charge is "
                    "never refunded"
                )
            self._resolve(reservation, "aborted")
        logger.info("aborted %s", reservation_id)

    def _get(self, reservation_id: str) -> Reservation:
        try:
            return self._events[reservation_id]
        except (KeyError, TypeError):
            raise ReservationUnknown(f"reservation_id: {reservation_id!r} does not exist") from None

    def _resolve(self, reservation: Reservation, state: str) -> None:
        if reservation.state != "reserved":
            return
        self._events[reservation.id] = dataclasses.replace(
            reservation, state=state, resolved_at=time.time()
        )

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
        """Smallest noise multiplier keeping history + ``rounds`` planned runs in budget.

        The same function as ``PrivacyLedger.calibrate_noise``
        (:func:`~privacy_ledger.budget.calibration.calibrate_for_budget`), on
        the committed and held events of this pair.

        Parameters
        ----------
        participant_id, asset_id
            Whose history and budget to use.
        rounds, steps_per_round, sample_rate
            The planned DP-SGD runs, each ``steps_per_round`` steps at ``sample_rate``.
        max_grad_norm
            Clipping norm (does not change epsilon; validated as evidence).
        epsilon
            Extra epsilon (exact decimal) the plan may add on top of the
            current history, capped by the remaining budget; ``None`` allows
            the whole remaining budget.

        Returns
        -------
        float
            Noise multiplier on the feasible side of a 0.1 % bisection.

        Raises
        ------
        CalibrationImpossible
            Even the largest noise multiplier would exceed the target.
        LedgerParameterInvalid
            A malformed plan or ``epsilon`` (the ledger's validation).
        """
        history = self.events(participant_id, asset_id, states=("committed", "reserved"))
        return calibrate_for_budget(
            [r.event for r in history],
            limit=self.budget(participant_id, asset_id),
            extra=epsilon,
            delta=self.delta,
            accountant=self.accountant,
            rounds=rounds,
            steps_per_round=steps_per_round,
            sample_rate=sample_rate,
            max_grad_norm=max_grad_norm,
        )

    def _epsilon(self, events: Iterable[MechanismEvent]) -> Decimal:
        return acc.epsilon(list(events), delta=self.delta, accountant=self.accountant)


def _limit(value: float | str | Decimal) -> Decimal:
    """Return an epsilon budget as an exact ``Decimal`` (floats at their shortest ``repr``)."""
    exact = repr(float(value)) if isinstance(value, float) else value
    try:
        return acc.parse_epsilon(exact)
    except LedgerParameterInvalid as exc:
        raise LearningParameterInvalid(exc.message) from None
