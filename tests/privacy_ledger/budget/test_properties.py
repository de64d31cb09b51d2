"""Property (hypothesis): for any sequence of plans, committed epsilon never exceeds the limit.

The ledger is compared with an independent model, Opacus' own RDP accountant
(not the ledger's accountant under test): a request must be refused when
Opacus' epsilon of committed + reserved + request exceeds the limit, and
granted when it stays below the limit by more than the ledger's rounding
quantum (the ledger rounds epsilon up to ``EPSILON_QUANTUM``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opacus.accountants import RDPAccountant

from privacy_ledger import BudgetExceeded, MechanismEvent, PrivacyLedger
from privacy_ledger.budget.accountant import EPSILON_QUANTUM

from ..helpers import event

_ids = itertools.count()

plans = st.lists(
    st.tuples(
        st.sampled_from([0.7, 1.0, 1.5, 3.0]),  # noise multiplier
        st.sampled_from([0.005, 0.01, 0.05]),  # sample rate
        st.integers(min_value=1, max_value=3000),  # steps
        st.sampled_from(["commit", "abort", "leave", "expire"]),
    ),
    min_size=1,
    max_size=8,
)


DELTA = 1e-5


def opacus_epsilon(events: list[MechanismEvent]) -> Decimal:
    """Epsilon of ``events`` by Opacus' RDP accountant (the independent model)."""
    if not events:
        return Decimal(0)
    accountant = RDPAccountant()
    accountant.history = [(e.noise_multiplier, e.sample_rate, e.steps) for e in events]
    return Decimal(accountant.get_epsilon(DELTA))


def close(ours: Decimal, theirs: Decimal) -> bool:
    """The ledger's epsilon is Opacus' rounded up to the quantum."""
    return theirs <= ours <= theirs + EPSILON_QUANTUM + Decimal("1e-12")


@pytest.fixture
def clocked(db_url: str) -> Iterator[tuple[PrivacyLedger, list[float]]]:
    now = [1_000_000.0]
    ledger = PrivacyLedger.from_url(db_url, clock=lambda: now[0])
    try:
        yield ledger, now
    finally:
        ledger.engine.dispose()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(plans=plans, limit=st.sampled_from(["0.5", "2", "3.7", "8"]))
def test_committed_epsilon_never_exceeds_limit(
    clocked: tuple[PrivacyLedger, list[float]],
    plans: list[tuple[float, float, int, str]],
    limit: str,
) -> None:
    ledger, now = clocked
    pid = f"p{next(_ids)}"
    ledger.register_participant(pid, institution="Prop", kind="other")
    ledger.register_asset(pid, "a")
    ledger.set_budget(pid, "a", epsilon=limit, delta=1e-5)
    committed: list[MechanismEvent] = []
    reserved: list[MechanismEvent] = []
    for sigma, q, steps, action in plans:
        planned = event(sigma, q, steps)
        projected = opacus_epsilon([*committed, *reserved, planned])
        try:
            reservation = ledger.reserve(pid, "a", planned, ttl_seconds=60)
        except BudgetExceeded as exc:
            assert projected + EPSILON_QUANTUM > Decimal(limit)  # over, or within rounding
            assert close(exc.spent + exc.reserved + exc.requested, projected)
        else:
            assert projected <= Decimal(limit)
            if action == "commit":
                ledger.commit(reservation.id)
                committed.append(planned)
            elif action == "abort":
                ledger.abort(reservation.id)
            elif action == "expire":
                now[0] += 61  # every open reservation of this participant passes its deadline
                ledger.expire_reservations()
                reserved.clear()
            else:
                reserved.append(planned)
        status = ledger.budget_status(pid, "a")
        assert close(status.spent, opacus_epsilon(committed))
        assert status.spent <= status.limit
        assert status.spent + status.reserved <= status.limit
