"""Noise calibration against a participant's history.

Opacus' ``make_private_with_epsilon`` searches the noise multiplier for an
*empty* history; a participant that already spent epsilon would overshoot its
budget. :func:`calibrate` composes the stored history with the planned
``rounds * steps_per_round`` Poisson-subsampled Gaussian steps and bisects
for the smallest noise multiplier whose total epsilon (same accountant, same
rounding up as enforcement) stays within the target. Epsilon is monotone
decreasing in the noise multiplier for both RDP and PRV accounting.
:func:`calibrate_for_budget` sets that target from a budget limit and an
optional extra epsilon.

Pure functions (no database): ``PrivacyLedger.calibrate_noise`` and the
in-memory budget gate of ``secure_fed.learning`` both call
:func:`calibrate_for_budget`, so a local-only baseline is calibrated exactly
like the real run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from decimal import Decimal

from privacy_ledger.budget import accountant as acc
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.errors import CalibrationImpossible, LedgerParameterInvalid

__all__ = ["calibrate", "calibrate_for_budget", "MAX_NOISE_MULTIPLIER"]

logger = logging.getLogger(__name__)

#: Above this noise multiplier the plan is considered impossible (the model would learn nothing).
MAX_NOISE_MULTIPLIER = 1000.0
_MIN_NOISE_MULTIPLIER = 0.05
_RELATIVE_TOLERANCE = 1e-3


def _check_plan(
    rounds: int, steps_per_round: int, sample_rate: float, max_grad_norm: float
) -> None:
    for name, value in (("rounds", rounds), ("steps_per_round", steps_per_round)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LedgerParameterInvalid(f"{name}: must be an int >= 1, got {value!r}")
    if not isinstance(sample_rate, int | float) or not 0 < sample_rate <= 1:
        raise LedgerParameterInvalid(f"sample_rate: must be in (0, 1], got {sample_rate!r}")
    if not isinstance(max_grad_norm, int | float) or not max_grad_norm > 0:
        raise LedgerParameterInvalid(f"max_grad_norm: must be > 0, got {max_grad_norm!r}")


def calibrate(
    history: Sequence[MechanismEvent],
    *,
    target: Decimal,
    delta: float,
    accountant: str,
    rounds: int,
    steps_per_round: int,
    sample_rate: float,
    max_grad_norm: float,
) -> float:
    """Smallest noise multiplier with epsilon(history + plan) <= ``target``.

    Parameters
    ----------
    history
        Events already committed or reserved for this budget.
    target
        Largest acceptable total epsilon after the plan.
    delta, accountant
        As in the budget (epsilon computed at ``delta`` with ``accountant``).
    rounds, steps_per_round, sample_rate, max_grad_norm
        The plan: ``rounds * steps_per_round`` steps at Poisson rate ``sample_rate``.

    Returns
    -------
    float
        The noise multiplier, on the feasible side of the bisection (relative
        tolerance 1e-3), so reserving the plan with it fits.

    Raises
    ------
    CalibrationImpossible
        When the history alone exhausts ``target`` or a noise multiplier of
        :data:`MAX_NOISE_MULTIPLIER` still does not fit.
    LedgerParameterInvalid
        For a malformed plan.
    """
    _check_plan(rounds, steps_per_round, sample_rate, max_grad_norm)
    acc.check_accountant(accountant)
    events = list(history)

    def fits(sigma: float) -> bool:
        plan = MechanismEvent(
            noise_multiplier=sigma,
            sample_rate=float(sample_rate),
            steps=rounds * steps_per_round,
            delta=delta,
            max_grad_norm=float(max_grad_norm),
        )
        return acc.epsilon([*events, plan], delta=delta, accountant=accountant) <= target

    if target <= 0 or not fits(MAX_NOISE_MULTIPLIER):
        raise CalibrationImpossible(
            f"no noise multiplier <= {MAX_NOISE_MULTIPLIER} keeps epsilon within {target} "
            f"for {rounds} rounds of {steps_per_round} steps at sample_rate {sample_rate}"
        )
    low, high = _MIN_NOISE_MULTIPLIER, 1.0
    while not fits(high):
        low, high = high, min(high * 2, MAX_NOISE_MULTIPLIER)
    if fits(low):
        return low
    while (high - low) / high > _RELATIVE_TOLERANCE:
        mid = math.sqrt(low * high)
        if fits(mid):
            high = mid
        else:
            low = mid
    logger.debug("calibrated noise multiplier %.6f for target epsilon %s", high, target)
    return high


def calibrate_for_budget(
    history: Sequence[MechanismEvent],
    *,
    limit: Decimal,
    extra: str | Decimal | None,
    delta: float,
    accountant: str,
    rounds: int,
    steps_per_round: int,
    sample_rate: float,
    max_grad_norm: float,
) -> float:
    """Smallest noise multiplier keeping ``history`` + the plan within a budget.

    Parameters
    ----------
    history
        Committed and active reserved events of the budget.
    limit
        The budget's epsilon limit.
    extra
        Extra epsilon the plan may add on top of epsilon(``history``), capped
        by the room left under ``limit``; ``None`` allows all of that room.
        An exact decimal (``str`` or ``Decimal``; floats are refused).
    delta, accountant, rounds, steps_per_round, sample_rate, max_grad_norm
        As in :func:`calibrate`.

    Returns
    -------
    float
        The noise multiplier returned by :func:`calibrate` for the target
        ``epsilon(history) + min(limit - epsilon(history), extra)``.

    Raises
    ------
    CalibrationImpossible
        When the history exhausts the budget or the plan cannot fit.
    LedgerParameterInvalid
        For a malformed plan or ``extra``.
    """
    current = acc.epsilon(history, delta=delta, accountant=accountant)
    room = limit - current
    if extra is not None:
        room = min(room, acc.parse_epsilon(extra))
    return calibrate(
        history,
        target=current + room,
        delta=delta,
        accountant=accountant,
        rounds=rounds,
        steps_per_round=steps_per_round,
        sample_rate=sample_rate,
        max_grad_norm=max_grad_norm,
    )
