"""The budget interface private training asks before it touches private data.

Refuse before running, charge on success, refund on failure (NOTES.md section
3; OpenDP filters, Tumult ``InsufficientBudgetError``). A participant
*reserves* the mechanism it is about to run (a :class:`MechanismEvent`), runs
it, then *commits*; on failure it *aborts* and nothing is charged unless
something was released. Epsilon is always recomputed from the whole mechanism
history with a Renyi-DP accountant (Mironov 2017; Opacus ``RDPAccountant``),
never summed per round (NOTES.md: summing 20 rounds gives 33.1 where the
composed value is 6.71).

:class:`BudgetGate` is the small interface the learning code depends on (the
``Protocol`` of STYLE.md rule 1); ``privacy_ledger.PrivacyLedger`` implements it
with a database and audit log. :class:`InMemoryBudgetGate` is a real, complete
in-process implementation for tests and benchmarks: same accountant, same
refusal rule, no persistence.
"""

from __future__ import annotations

import functools
import logging
import math
import secrets
import threading
import warnings
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Protocol

import numpy as np
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis import rdp as rdp_analysis

from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.errors import BudgetExceeded, CalibrationImpossible, ParticipantSuspended
from secure_fed.errors import BudgetRefused, LearningParameterInvalid, ReservationUnknown

__all__ = [
    "BudgetGate",
    "InMemoryBudgetGate",
    "Reservation",
    "epsilon_of",
    "refusal_errors",
    "reservation_id_of",
]

logger = logging.getLogger(__name__)

_SIGMA_MIN = 0.3
_SIGMA_MAX = 200.0


class BudgetGate(Protocol):
    """Reserve / commit / abort budget, and calibrate noise against history.

    ``privacy_ledger.PrivacyLedger`` and :class:`InMemoryBudgetGate` implement
    it. ``reserve`` returns a reservation object carrying its id as
    ``reservation_id`` or ``id`` (read it with :func:`reservation_id_of`).
    Refusals raise one of :func:`refusal_errors`.
    """

    def reserve(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        *,
        round_id: str | None = None,
    ) -> object:
        """Hold budget for ``event``, or raise the gate's refusal error (nothing spent)."""
        ...

    def commit(self, reservation_id: str) -> None:
        """Charge a held reservation: the mechanism ran."""
        ...

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Release a held reservation; charge it anyway if ``released_anything``."""
        ...

    def epsilon_spent(self, participant_id: str, asset_id: str) -> float | Decimal:
        """Epsilon of the committed history, recomputed from its mechanism events."""
        ...

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
        """Smallest noise multiplier keeping history + planned rounds within budget.

        ``epsilon`` is the extra epsilon the plan may add on top of the current
        history (committed and held), capped by the remaining budget; ``None``
        allows the whole remaining budget.
        """
        ...


def epsilon_of(events: list[tuple[float, float, int]], delta: float) -> float:
    """Epsilon of composed ``(noise_multiplier, sample_rate, steps)`` events (RDP).

    Same orders and conversion as Opacus' ``RDPAccountant.get_epsilon`` (the
    per-step RDP curve is cached, and scaled by the step count, which is exact).

    Parameters
    ----------
    events
        Mechanism history; each tuple is one Poisson-subsampled Gaussian run.
    delta
        Target delta.

    Returns
    -------
    float
        Epsilon at ``delta``; 0.0 for an empty history.
    """
    if not events:
        return 0.0
    rdp = sum(steps * _rdp_per_step(q, sigma) for sigma, q, steps in events)
    with warnings.catch_warnings():  # "optimal order is the largest alpha": still an upper bound
        warnings.simplefilter("ignore", UserWarning)
        eps, _ = rdp_analysis.get_privacy_spent(orders=_ORDERS, rdp=rdp, delta=delta)
    return float(eps)


_ORDERS: list[float] = [float(a) for a in RDPAccountant.DEFAULT_ALPHAS]


@functools.lru_cache(maxsize=4096)
def _rdp_per_step(sample_rate: float, sigma: float) -> np.ndarray:
    """RDP of one step at Opacus' default orders (RDP composes linearly in steps)."""
    rdp = np.asarray(
        rdp_analysis.compute_rdp(q=sample_rate, noise_multiplier=sigma, steps=1, orders=_ORDERS),
        dtype=np.float64,
    )
    rdp.flags.writeable = False
    return rdp


@dataclass(frozen=True)
class Reservation:
    """A held budget reservation of :class:`InMemoryBudgetGate`."""

    reservation_id: str
    participant_id: str
    asset_id: str
    event: MechanismEvent
    round_id: str | None

    @property
    def id(self) -> str:
        """Alias of ``reservation_id`` (the ledger's name)."""
        return self.reservation_id


class InMemoryBudgetGate:
    """In-process :class:`BudgetGate` with per-(participant, asset) epsilon budgets.

    Parameters
    ----------
    epsilon
        Default epsilon budget of every (participant, asset) pair (> 0).
    delta
        Delta at which budgets are enforced (0 < delta < 1).

    Notes
    -----
    Held reservations count against the budget until committed or aborted, so
    two concurrent reservations cannot both slip under it. Comparisons use the
    RDP accountant's upper bound, which never underestimates epsilon.
    """

    def __init__(self, *, epsilon: float, delta: float) -> None:
        _check_budget(epsilon, delta)
        self.default_epsilon = float(epsilon)
        self.delta = float(delta)
        self._budgets: dict[tuple[str, str], float] = {}
        self._spent: dict[tuple[str, str], list[MechanismEvent]] = {}
        self._held: dict[str, Reservation] = {}
        self._lock = threading.Lock()

    def set_budget(self, participant_id: str, asset_id: str, *, epsilon: float) -> None:
        """Give one (participant, asset) pair its own epsilon budget."""
        _check_budget(epsilon, self.delta)
        self._budgets[(participant_id, asset_id)] = float(epsilon)

    def budget(self, participant_id: str, asset_id: str) -> float:
        """Epsilon budget of a (participant, asset) pair."""
        return self._budgets.get((participant_id, asset_id), self.default_epsilon)

    def epsilon_spent(self, participant_id: str, asset_id: str) -> float:
        """Epsilon of the committed history, recomputed with the RDP accountant."""
        return epsilon_of(_triples(self._spent.get((participant_id, asset_id), [])), self.delta)

    def _history(self, participant_id: str, asset_id: str) -> list[tuple[float, float, int]]:
        held = [
            r.event
            for r in self._held.values()
            if (r.participant_id, r.asset_id) == (participant_id, asset_id)
        ]
        return _triples(self._spent.get((participant_id, asset_id), []) + held)

    def reserve(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        *,
        round_id: str | None = None,
    ) -> Reservation:
        """Hold budget for ``event``.

        Raises
        ------
        BudgetRefused
            History (spent and held) plus ``event`` would exceed the budget.
        """
        with self._lock:
            history = self._history(participant_id, asset_id) + _triples([event])
            eps = epsilon_of(history, self.delta)
            limit = self.budget(participant_id, asset_id)
            if eps > limit:
                raise BudgetRefused(
                    f"reservation refused for participant {participant_id!r}, asset "
                    f"{asset_id!r}: epsilon would reach {eps:.4f} > budget {limit:.4f} "
                    f"at delta {self.delta:g}; nothing was spent"
                )
            reservation = Reservation(
                secrets.token_hex(16), participant_id, asset_id, event, round_id
            )
            self._held[reservation.reservation_id] = reservation
            logger.info(
                "reserved %s for %s/%s (round %s): epsilon would be %.4f of %.4f",
                reservation.reservation_id, participant_id, asset_id, round_id, eps, limit,
            )
            return reservation

    def commit(self, reservation_id: str) -> None:
        """Charge a held reservation (the mechanism ran).

        Raises
        ------
        ReservationUnknown
            The id is unknown or already committed/aborted.
        """
        with self._lock:
            reservation = self._pop(reservation_id)
            key = (reservation.participant_id, reservation.asset_id)
            self._spent.setdefault(key, []).append(reservation.event)

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Release a held reservation; charge it when something was released.

        Raises
        ------
        ReservationUnknown
            The id is unknown or already committed/aborted.
        """
        with self._lock:
            reservation = self._pop(reservation_id)
            if released_anything:
                key = (reservation.participant_id, reservation.asset_id)
                self._spent.setdefault(key, []).append(reservation.event)
            logger.info("aborted %s (charged: %s)", reservation_id, released_anything)

    def _pop(self, reservation_id: str) -> Reservation:
        try:
            return self._held.pop(reservation_id)
        except KeyError:
            raise ReservationUnknown(
                f"reservation {reservation_id!r} is unknown or already committed/aborted"
            ) from None

    def calibrate_noise(
        self,
        participant_id: str,
        asset_id: str,
        *,
        rounds: int,
        steps_per_round: int,
        sample_rate: float,
        max_grad_norm: float,
        epsilon: str | Decimal | float | None = None,
    ) -> float:
        """Smallest noise multiplier keeping history + ``rounds`` planned runs in budget.

        Parameters
        ----------
        participant_id, asset_id
            Whose history and budget to use.
        rounds, steps_per_round, sample_rate
            The planned DP-SGD runs, each ``steps_per_round`` steps at ``sample_rate``.
        max_grad_norm
            Clipping norm (does not change epsilon; validated as evidence).
        epsilon
            Extra epsilon the plan may add on top of the current history
            (committed and held), capped by the remaining budget; ``None``
            allows the whole remaining budget (the ledger's semantics).

        Returns
        -------
        float
            Noise multiplier, rounded up by bisection (never under the target).

        Raises
        ------
        BudgetRefused
            Even a noise multiplier of 200 would exceed the target.
        """
        if rounds < 1 or steps_per_round < 1 or not 0 < sample_rate <= 1 or max_grad_norm <= 0:
            raise LearningParameterInvalid(
                "calibrate_noise needs rounds >= 1, steps_per_round >= 1, 0 < sample_rate <= 1"
                f" and max_grad_norm > 0; got {rounds}, {steps_per_round}, {sample_rate},"
                f" {max_grad_norm}"
            )
        limit = self.budget(participant_id, asset_id)
        with self._lock:
            history = self._history(participant_id, asset_id)
        target = limit
        if epsilon is not None:
            target = min(limit, epsilon_of(history, self.delta) + _positive_epsilon(epsilon))
        return calibrate(history, target, self.delta, rounds, steps_per_round, sample_rate)


def calibrate(
    history: list[tuple[float, float, int]],
    target: float,
    delta: float,
    rounds: int,
    steps_per_round: int,
    sample_rate: float,
) -> float:
    """Bisect the noise multiplier so that history + plan stays within ``target``."""

    def eps(sigma: float) -> float:
        return epsilon_of(history + [(sigma, sample_rate, steps_per_round * rounds)], delta)

    if eps(_SIGMA_MAX) > target:
        raise BudgetRefused(
            f"no noise multiplier <= {_SIGMA_MAX} keeps epsilon within {target:.4f} at delta "
            f"{delta:g} for {rounds} more round(s); the budget is exhausted"
        )
    if eps(_SIGMA_MIN) <= target:
        return _SIGMA_MIN
    lo, hi = math.log(_SIGMA_MIN), math.log(_SIGMA_MAX)
    while hi - lo > 5e-3:  # relative precision 0.5 % on sigma, rounded up
        mid = (lo + hi) / 2
        if eps(math.exp(mid)) > target:
            lo = mid
        else:
            hi = mid
    return math.exp(hi)


def _positive_epsilon(value: str | Decimal | float) -> float:
    try:
        number = float(Decimal(str(value).strip()))
    except (InvalidOperation, ValueError):
        raise LearningParameterInvalid(f"epsilon must be a number, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise LearningParameterInvalid(f"epsilon must be finite and > 0, got {value!r}")
    return number


def _triples(events: list[MechanismEvent]) -> list[tuple[float, float, int]]:
    return [(e.noise_multiplier, e.sample_rate, e.steps) for e in events]


def _check_budget(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise LearningParameterInvalid(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not 0 < delta < 1:
        raise LearningParameterInvalid(f"delta must be in (0, 1), got {delta!r}")


def refusal_errors() -> tuple[type[Exception], ...]:
    """Exception types meaning "the budget refused; nothing was spent".

    :class:`~secure_fed.errors.BudgetRefused` (in-memory gate) and the
    ledger's ``BudgetExceeded``, ``CalibrationImpossible`` and
    ``ParticipantSuspended``. Other ledger errors (no budget set, database
    failures) are configuration or infrastructure faults and propagate.
    """
    return (BudgetRefused, BudgetExceeded, CalibrationImpossible, ParticipantSuspended)


def reservation_id_of(reservation: object) -> str:
    """Id of a reservation: ``reservation_id`` (this protocol) or ``id`` (ledger rows)."""
    for attribute in ("reservation_id", "id"):
        value = getattr(reservation, attribute, None)
        if isinstance(value, str) and value:
            return value
    raise ReservationUnknown(f"{type(reservation).__name__} carries no reservation id")
