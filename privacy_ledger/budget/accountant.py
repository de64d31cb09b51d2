"""Epsilon of a whole mechanism history, recomputed with Opacus' accountants.

The ledger never sums per-round epsilons: composition is sub-additive, so a
sum overstates the loss (20 rounds of sigma 1, q 0.01, 500 steps at delta 1e-5
are 6.71 when composed, 33.1 when summed; see ``docs/audit/ledger.md``). It
keeps the mechanism events and recomputes epsilon over the full history with

* ``rdp``: Renyi DP of the Poisson-subsampled Gaussian mechanism (Mironov 2017;
  Mironov, Talwar, Zhang 2019), converted to (epsilon, delta) with Balle et al.
  2020, Theorem 21: Opacus' ``RDPAccountant`` arithmetic, same orders;
* ``prv``: numerical composition of privacy loss random variables (Gopi, Lee,
  Wutschitz 2021): Opacus' ``PRVAccountant``, whose *upper* bound is used.
  When its grid would exceed :data:`PRV_MAX_GRID_POINTS` (very small noise
  multipliers, where it would allocate gigabytes), the RDP bound is used.

The Gaussian (GDP/CLT) accountant is refused for enforcement: it can
underestimate epsilon. Results are rounded *up* to :data:`EPSILON_QUANTUM`
and returned as :class:`~decimal.Decimal`, so comparisons with a budget never
go through a float that may have rounded down.

This module is pure (no database): the ledger and the in-memory budget gate
of ``secure_fed.learning`` both account with it.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import warnings
from collections.abc import Callable, Iterable, Sequence
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.errors import AccountantNotAllowed, LedgerParameterInvalid

__all__ = [
    "ACCOUNTANTS",
    "REFUSED_ACCOUNTANTS",
    "EPSILON_QUANTUM",
    "PRV_MAX_GRID_POINTS",
    "RDP_ORDERS",
    "HistoryEntry",
    "check_accountant",
    "compose",
    "epsilon",
    "parse_epsilon",
    "round_ends",
    "round_up",
]

#: Budgets are compared at this resolution, epsilons always rounded up to it.
EPSILON_QUANTUM = Decimal("1e-9")
_MAX_EPSILON = Decimal(1_000_000)

logger = logging.getLogger(__name__)

#: Largest PRV discretisation grid computed; above it (tiny noise multipliers) the
#: RDP bound, also a valid upper bound, is used instead of allocating gigabytes.
PRV_MAX_GRID_POINTS = 4_000_000
_PRV_EPS_ERROR = 0.01

#: (noise multiplier, sample rate, steps), the history format of Opacus accountants.
HistoryEntry = tuple[float, float, int]


#: Opacus' ``RDPAccountant.DEFAULT_ALPHAS`` (a test checks they stay equal).
RDP_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + [float(a) for a in range(12, 64)]
)


@functools.cache
def _opacus_rdp() -> Any:
    """Opacus' RDP analysis module, without importing torch when possible.

    ``opacus/accountants/analysis/rdp.py`` needs only numpy and scipy, but
    importing it through the package runs ``opacus/__init__`` (torch, seconds
    per process). Load that one file directly; fall back to a normal import.
    """
    spec = importlib.util.find_spec("opacus")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "accountants/analysis/rdp.py"
        file_spec = importlib.util.spec_from_file_location("privacy_ledger._opacus_rdp", path)
        if file_spec is not None and file_spec.loader is not None:
            module = importlib.util.module_from_spec(file_spec)
            file_spec.loader.exec_module(module)
            # "Optimal order is the smallest/largest alpha": the bound stays valid
            # (only looser); silenced for this private copy only, not for Opacus.
            warnings.filterwarnings(
                "ignore", message="Optimal order is", module=r"privacy_ledger\._opacus_rdp"
            )
            return module
    from opacus.accountants.analysis import rdp  # pragma: no cover - unusual installs

    return rdp  # pragma: no cover


@functools.lru_cache(maxsize=4096)
def _rdp_one_step(sample_rate: float, noise_multiplier: float) -> tuple[float, ...]:
    values = _opacus_rdp().compute_rdp(
        q=sample_rate, noise_multiplier=noise_multiplier, steps=1, orders=list(RDP_ORDERS)
    )
    return tuple(float(v) for v in values)


def _rdp_epsilon(history: Sequence[HistoryEntry], delta: float) -> float:
    import numpy as np

    total: Any = np.zeros(len(RDP_ORDERS))
    for noise_multiplier, sample_rate, steps in history:
        total = total + np.asarray(_rdp_one_step(sample_rate, noise_multiplier)) * steps
    eps, _ = _opacus_rdp().get_privacy_spent(orders=list(RDP_ORDERS), rdp=total, delta=delta)
    return float(eps)


def _prv_grid_points(history: Sequence[HistoryEntry], delta: float) -> float:
    """Size of the discretisation grid PRVAccountant would allocate (its own formula)."""
    import numpy as np
    from opacus.accountants.analysis.prv import (
        PoissonSubsampledGaussianPRV,
        compute_safe_domain_size,
    )

    delta_error = delta / 1000
    prvs = [PoissonSubsampledGaussianPRV(q, sigma) for sigma, q, _ in history]
    steps = [s for _, _, s in history]
    half_width = compute_safe_domain_size(
        prvs=prvs, max_self_compositions=steps, eps_error=_PRV_EPS_ERROR, delta_error=delta_error
    )
    mesh = _PRV_EPS_ERROR / np.sqrt(sum(steps) * np.log(12 / delta_error) / 2)
    return float(2 * half_width / mesh)


def _prv_epsilon(history: Sequence[HistoryEntry], delta: float) -> float:
    from opacus.accountants import PRVAccountant

    points = _prv_grid_points(history, delta)
    if not points <= PRV_MAX_GRID_POINTS:
        logger.info("PRV grid of %.3g points too large; using the RDP bound instead", points)
        return _rdp_epsilon(history, delta)
    accountant = PRVAccountant()
    accountant.history = list(history)
    return float(accountant.get_epsilon(delta, eps_error=_PRV_EPS_ERROR))


#: Accountants allowed for enforcement (refusals list these names from this registry).
ACCOUNTANTS: dict[str, Callable[[Sequence[HistoryEntry], float], float]] = {
    "rdp": _rdp_epsilon,
    "prv": _prv_epsilon,
}
#: Known accountants refused for enforcement, with the reason given in errors.
REFUSED_ACCOUNTANTS: dict[str, str] = {
    "gdp": "the Gaussian (CLT) accountant can underestimate epsilon",
}


def check_accountant(name: str) -> str:
    """Return ``name`` if it is an enforcement accountant.

    Raises
    ------
    AccountantNotAllowed
        When ``name`` is refused (``gdp``) or unknown; the message lists the allowed names.
    """
    if name in ACCOUNTANTS:
        return name
    allowed = ", ".join(sorted(ACCOUNTANTS))
    why = REFUSED_ACCOUNTANTS.get(name, "unknown accountant")
    raise AccountantNotAllowed(f"accountant: {name!r} refused ({why}); allowed: {allowed}")


def compose(events: Iterable[MechanismEvent]) -> list[HistoryEntry]:
    """Merge events with the same (noise multiplier, sample rate) into one entry.

    Composition is commutative for both accountants (RDP adds, PRV convolves),
    so merging is exact for RDP and keeps PRV fast (its cost grows with the
    number of distinct entries).

    Parameters
    ----------
    events
        Mechanism events in any order.

    Returns
    -------
    list of (noise_multiplier, sample_rate, steps)
        One entry per distinct pair, in order of first appearance.
    """
    merged: dict[tuple[float, float], int] = {}
    for event in events:
        key = (float(event.noise_multiplier), float(event.sample_rate))
        merged[key] = merged.get(key, 0) + int(event.steps)
    return [(sigma, q, steps) for (sigma, q), steps in merged.items()]


def round_up(value: float) -> Decimal:
    """Round a float epsilon up to :data:`EPSILON_QUANTUM` (``inf`` stays infinite).

    Raises
    ------
    AccountantNotAllowed
        Never; NaN is mapped to infinity (no privacy claim can be made).
    """
    if value != value or value == float("inf"):
        return Decimal("Infinity")
    return Decimal(value).quantize(EPSILON_QUANTUM, rounding=ROUND_CEILING)


def epsilon(events: Iterable[MechanismEvent], *, delta: float, accountant: str) -> Decimal:
    """Epsilon of the composition of ``events`` at ``delta``, rounded up.

    Parameters
    ----------
    events
        The whole history to account for (committed, reserved and planned).
    delta
        Target delta of the budget.
    accountant
        ``rdp`` or ``prv`` (see :data:`ACCOUNTANTS`).

    Returns
    -------
    Decimal
        Epsilon rounded up to :data:`EPSILON_QUANTUM`; ``0`` for an empty history.

    Raises
    ------
    AccountantNotAllowed
        When ``accountant`` is not allowed for enforcement.
    """
    name = check_accountant(accountant)
    history = compose(events)
    if not history:
        return Decimal(0)
    return round_up(_memo_epsilon(name, tuple(history), float(delta)))


@functools.lru_cache(maxsize=2048)
def _memo_epsilon(accountant: str, history: tuple[HistoryEntry, ...], delta: float) -> float:
    """Memoised accountant call: a pure function of the composed history.

    Budget queries recompute the epsilon of every committed prefix on every
    call; the PRV accountant takes about half a second per history, so a
    read-heavy caller (the REST API) would otherwise pay it on each request.
    """
    return ACCOUNTANTS[accountant](history, delta)


def round_ends(round_ids: Iterable[str | None]) -> list[tuple[str | None, int]]:
    """Group a committed history by round: ``(round_id, index of its last event)`` each.

    Consecutive events of one round form one group (a round commits several
    mechanisms); an event without a round id is a group of its own. The
    epsilon "after a round" is the epsilon of the history up to that index.
    """
    groups: list[tuple[str | None, int]] = []
    for i, round_id in enumerate(round_ids):
        if groups and round_id is not None and groups[-1][0] == round_id:
            groups[-1] = (round_id, i)
        else:
            groups.append((round_id, i))
    return groups


def parse_epsilon(value: object, name: str = "epsilon") -> Decimal:
    """Parse an epsilon given as ``str``, ``Decimal`` or ``int`` into a finite ``Decimal`` > 0.

    Floats are refused: a budget must never be compared through a value that
    binary rounding may have lowered.

    Raises
    ------
    LedgerParameterInvalid
        For floats, non-numbers, non-finite, zero or negative values, naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, str | Decimal | int):
        raise LedgerParameterInvalid(
            f"{name}: pass an exact decimal (str or Decimal), not {type(value).__name__}"
        )
    try:
        dec = Decimal(value.strip() if isinstance(value, str) else value)
    except InvalidOperation as exc:
        raise LedgerParameterInvalid(f"{name}: {value!r} is not a decimal number") from exc
    if not dec.is_finite() or not 0 < dec <= _MAX_EPSILON:
        raise LedgerParameterInvalid(
            f"{name}: must be finite, > 0 and <= {_MAX_EPSILON}, got {value!r}"
        )
    return dec
