"""The in-memory budget gate: the ledger's accountant, calibration and reservation rules."""

import math
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privacy_ledger import PrivacyLedger, Reservation
from privacy_ledger.budget.accountant import epsilon
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.errors import (
    CalibrationImpossible,
    LedgerParameterInvalid,
    ReservationNotActive,
    ReservationUnknown,
)
from secure_fed.errors import BudgetRefused, LearningParameterInvalid
from secure_fed.learning.budget_gate import InMemoryBudgetGate, refusal_errors

DELTA = 1e-5


def _event(sigma=1.0, q=0.01, steps=100):
    return MechanismEvent(
        noise_multiplier=sigma, sample_rate=q, steps=steps, delta=DELTA, max_grad_norm=1.0
    )


def _eps(*events):
    return epsilon(list(events), delta=DELTA, accountant="rdp")


def test_epsilon_is_the_ledgers_rounded_up_rdp():
    gate = InMemoryBudgetGate(epsilon=10.0, delta=DELTA)
    gate.commit(gate.reserve("p", "a", _event(steps=1000)).id)
    spent = gate.epsilon_spent("p", "a")
    assert isinstance(spent, Decimal) and spent == _eps(_event(steps=1000))
    assert spent.quantize(Decimal("0.0001")) == Decimal("2.1014")  # Opacus' RDPAccountant


def test_reserve_commit_and_refuse_nothing_spent():
    gate = InMemoryBudgetGate(epsilon=2.0, delta=DELTA)
    r = gate.reserve("p", "a", _event(steps=500), round_id="r1")
    assert isinstance(r, Reservation) and r.state == "reserved" and r.round_id == "r1"
    assert r.epsilon_projected == _eps(_event(steps=500)) and r.expires_at == math.inf
    assert gate.epsilon_spent("p", "a") == 0  # held, not spent
    gate.commit(r.id)
    spent = gate.epsilon_spent("p", "a")
    assert 1 < spent < 2
    with pytest.raises(BudgetRefused, match="nothing was spent") as e:
        gate.reserve("p", "a", _event(steps=2000))
    assert e.value.code == "LEARNING_BUDGET_REFUSED"
    assert gate.epsilon_spent("p", "a") == spent
    assert gate.epsilon_spent("q", "a") == 0  # budgets are per participant
    assert [x.state for x in gate.events("p", "a")] == ["committed"]


def test_held_reservations_count_and_abort_releases():
    gate = InMemoryBudgetGate(epsilon=2.0, delta=DELTA)
    first = gate.reserve("p", "a", _event(steps=700))
    with pytest.raises(BudgetRefused):
        gate.reserve("p", "a", _event(steps=700))
    gate.abort(first.id)
    second = gate.reserve("p", "a", _event(steps=700))
    gate.abort(second.id, released_anything=True)  # released: charged anyway
    assert gate.epsilon_spent("p", "a") == _eps(_event(steps=700))
    assert [x.state for x in gate.events("p", "a")] == ["aborted", "committed"]


def test_resolution_rules_are_the_ledgers():
    gate = InMemoryBudgetGate(epsilon=2.0, delta=DELTA)
    r = gate.reserve("p", "a", _event())
    gate.commit(r.id)
    gate.commit(r.id)  # idempotent: charged once
    assert gate.epsilon_spent("p", "a") == _eps(_event())
    with pytest.raises(ReservationNotActive, match="never refunded"):
        gate.abort(r.id)
    aborted = gate.reserve("p", "a", _event())
    gate.abort(aborted.id)
    gate.abort(aborted.id)  # no-op
    with pytest.raises(ReservationNotActive, match="aborted"):
        gate.commit(aborted.id)
    with pytest.raises(ReservationUnknown, match="does not exist") as e:
        gate.abort("nope")
    assert e.value.code == "LEDGER_RESERVATION_UNKNOWN"


def test_calibration_is_tight_and_history_aware():
    gate = InMemoryBudgetGate(epsilon=4.0, delta=DELTA)
    plan = {"rounds": 5, "steps_per_round": 50, "sample_rate": 0.05, "max_grad_norm": 1.0}
    sigma = gate.calibrate_noise("p", "a", **plan)
    assert _eps(_event(sigma, 0.05, 250)) <= 4
    assert _eps(_event(sigma * 0.998, 0.05, 250)) > 4  # bisection stops at 0.1 %
    gate.commit(gate.reserve("p", "a", _event(sigma=sigma, q=0.05, steps=50)).id)
    later = gate.calibrate_noise("p", "a", **{**plan, "rounds": 4})
    assert later == pytest.approx(sigma, rel=0.01)  # the plan still fits as planned
    other = InMemoryBudgetGate(epsilon=4.0, delta=DELTA)
    other.commit(other.reserve("p", "a", _event(sigma=1.0, q=0.05, steps=20)).id)
    assert other.calibrate_noise("p", "a", **{**plan, "rounds": 4}) > sigma  # history costs
    extra = gate.calibrate_noise("p", "a", **{**plan, "rounds": 4}, epsilon="0.5")
    assert extra > later  # a smaller extra epsilon needs more noise


def test_calibration_refuses_when_exhausted():
    gate = InMemoryBudgetGate(epsilon=3.0, delta=DELTA)
    gate.commit(gate.reserve("p", "a", _event(steps=500)).id)
    gate.set_budget("p", "a", epsilon="1")  # the history alone is over the new budget
    with pytest.raises(CalibrationImpossible, match="no noise multiplier"):
        gate.calibrate_noise(
            "p", "a", rounds=1, steps_per_round=1, sample_rate=0.01, max_grad_norm=1.0
        )
    assert CalibrationImpossible in refusal_errors() and BudgetRefused in refusal_errors()


def test_invalid_parameters():
    with pytest.raises(LearningParameterInvalid, match="epsilon"):
        InMemoryBudgetGate(epsilon=0.0, delta=DELTA)
    with pytest.raises(LearningParameterInvalid, match="delta"):
        InMemoryBudgetGate(epsilon=1.0, delta=1.0)
    with pytest.raises(LearningParameterInvalid, match="accountant: 'gdp' refused"):
        InMemoryBudgetGate(epsilon=1.0, delta=DELTA, accountant="gdp")
    gate = InMemoryBudgetGate(epsilon=1.0, delta=DELTA)
    with pytest.raises(LearningParameterInvalid, match="event"):
        gate.reserve("p", "a", (1.0, 0.01, 10))
    with pytest.raises(LedgerParameterInvalid, match="rounds"):
        gate.calibrate_noise(
            "p", "a", rounds=0, steps_per_round=1, sample_rate=0.1, max_grad_norm=1.0
        )
    with pytest.raises(LedgerParameterInvalid, match="epsilon"):
        gate.calibrate_noise(
            "p", "a", rounds=1, steps_per_round=1, sample_rate=0.1, max_grad_norm=1.0, epsilon="-1"
        )


def test_prv_accountant_is_the_ledgers():
    gate = InMemoryBudgetGate(epsilon=3.0, delta=DELTA, accountant="prv")
    gate.commit(gate.reserve("p", "a", _event(steps=500)).id)
    prv = epsilon([_event(steps=500)], delta=DELTA, accountant="prv")
    assert gate.epsilon_spent("p", "a") == prv < _eps(_event(steps=500))


def test_set_budget():
    gate = InMemoryBudgetGate(epsilon=1.0, delta=DELTA)
    gate.set_budget("p", "a", epsilon="5")
    assert gate.budget("p", "a") == 5 and gate.budget("p", "b") == Decimal("1.0")
    gate.set_budget("p", "b", epsilon=0.1)  # a float is taken at its shortest repr
    assert gate.budget("p", "b") == Decimal("0.1")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 3.0), st.integers(1, 400), st.booleans()), max_size=8))
def test_spent_never_exceeds_budget(requests):
    gate = InMemoryBudgetGate(epsilon=3.0, delta=DELTA)
    for sigma, steps, commit in requests:
        try:
            r = gate.reserve("p", "a", _event(sigma=sigma, q=0.02, steps=steps))
        except BudgetRefused:
            continue
        (gate.commit if commit else gate.abort)(r.id)
        assert gate.epsilon_spent("p", "a") <= 3


# --- one accountant: the in-memory gate and the ledger agree ------------------

HISTORY = [  # (event, committed?) the held one counts for calibration, not for spent
    (_event(1.0, 0.01, 500), True),
    (_event(1.3, 0.02, 200), True),
    (_event(2.0, 0.05, 40), False),
]


def _twins(tmp_path, limit):
    ledger = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.register_participant("p", institution="Hospital", kind="hospital")
    ledger.register_asset("p", "a")
    ledger.set_budget("p", "a", epsilon=limit, delta=DELTA)
    gate = InMemoryBudgetGate(epsilon=float(limit), delta=DELTA)
    for event, committed in HISTORY:
        for twin in (ledger, gate):
            r = twin.reserve("p", "a", event, round_id="r1")
            if committed:
                twin.commit(r.id)
    return ledger, gate


@pytest.mark.parametrize(
    ("limit", "plan", "extra"),
    [
        ("4", {"rounds": 5, "steps_per_round": 50, "sample_rate": 0.05}, None),
        ("4", {"rounds": 3, "steps_per_round": 200, "sample_rate": 0.01}, "0.5"),
        ("60", {"rounds": 1, "steps_per_round": 10, "sample_rate": 0.01}, None),
    ],
)
def test_same_sigma_and_epsilon_as_the_ledger(tmp_path, limit, plan, extra):
    ledger, gate = _twins(tmp_path, limit)
    try:
        args = {"max_grad_norm": 1.0, "epsilon": extra, **plan}
        sigma = ledger.calibrate_noise("p", "a", **args)
        assert gate.calibrate_noise("p", "a", **args) == sigma
        assert gate.epsilon_spent("p", "a") == ledger.epsilon_spent("p", "a")
        event = MechanismEvent(
            noise_multiplier=sigma,
            sample_rate=plan["sample_rate"],
            steps=plan["steps_per_round"],
            delta=DELTA,
            max_grad_norm=1.0,
        )
        ours, theirs = gate.reserve("p", "a", event), ledger.reserve("p", "a", event)
        assert ours.epsilon_projected == theirs.epsilon_projected
    finally:
        ledger.engine.dispose()


def test_same_refusals_as_the_ledger(tmp_path):
    ledger, gate = _twins(tmp_path, "3")
    try:
        ledger.set_budget("p", "a", epsilon="2", delta=DELTA)
        gate.set_budget("p", "a", epsilon=2.0)  # below the history's epsilon (about 2.3)
        plan = {"rounds": 1, "steps_per_round": 10, "sample_rate": 0.01, "max_grad_norm": 1.0}
        for twin in (ledger, gate):
            with pytest.raises(CalibrationImpossible):
                twin.calibrate_noise("p", "a", **plan)
            with pytest.raises(LedgerParameterInvalid, match="not float"):
                twin.calibrate_noise("p", "a", **{**plan, "rounds": 1}, epsilon=0.5)
    finally:
        ledger.engine.dispose()
