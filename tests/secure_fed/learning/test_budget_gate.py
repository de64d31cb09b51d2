import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opacus.accountants import RDPAccountant

from privacy_ledger.budget.mechanism import MechanismEvent
from secure_fed.errors import BudgetRefused, LearningParameterInvalid, ReservationUnknown
from secure_fed.learning.budget_gate import (
    InMemoryBudgetGate,
    epsilon_of,
    refusal_errors,
    reservation_id_of,
)


def _event(sigma=1.0, q=0.01, steps=100):
    return MechanismEvent(noise_multiplier=sigma, sample_rate=q, steps=steps, delta=1e-5,
                          max_grad_norm=1.0)


def test_epsilon_matches_opacus_and_notes():
    # NOTES.md section 3: sigma 1.0, q 0.01, 1000 steps, delta 1e-5 -> RDP 2.1014
    assert epsilon_of([(1.0, 0.01, 1000)], 1e-5) == pytest.approx(2.1014, abs=1e-4)
    accountant = RDPAccountant()
    accountant.history = [(1.1, 0.02, 300), (0.9, 0.05, 40)]
    assert epsilon_of(accountant.history, 1e-5) == pytest.approx(accountant.get_epsilon(1e-5))
    # 20 rounds of (1, 0.01, 500) compose to 6.71, not 20 * 1.65
    assert epsilon_of([(1.0, 0.01, 500)] * 20, 1e-5) == pytest.approx(6.71, abs=0.01)
    assert epsilon_of([], 1e-5) == 0.0


def test_reserve_commit_and_refuse_nothing_spent():
    gate = InMemoryBudgetGate(epsilon=2.0, delta=1e-5)
    r = gate.reserve("p", "a", _event(steps=500), round_id="r1")
    assert gate.epsilon_spent("p", "a") == 0.0  # held, not spent
    gate.commit(r.reservation_id)
    spent = gate.epsilon_spent("p", "a")
    assert 1.0 < spent < 2.0
    with pytest.raises(BudgetRefused, match="nothing was spent") as e:
        gate.reserve("p", "a", _event(steps=2000))
    assert e.value.code == "LEARNING_BUDGET_REFUSED"
    assert gate.epsilon_spent("p", "a") == spent
    assert gate.epsilon_spent("q", "a") == 0.0  # budgets are per participant


def test_held_reservations_count_and_abort_releases():
    gate = InMemoryBudgetGate(epsilon=2.0, delta=1e-5)
    first = gate.reserve("p", "a", _event(steps=700))
    with pytest.raises(BudgetRefused):
        gate.reserve("p", "a", _event(steps=700))
    gate.abort(first.id)
    second = gate.reserve("p", "a", _event(steps=700))
    gate.abort(second.reservation_id, released_anything=True)  # released: charged anyway
    assert gate.epsilon_spent("p", "a") == pytest.approx(epsilon_of([(1.0, 0.01, 700)], 1e-5))


def test_unknown_or_resolved_reservation():
    gate = InMemoryBudgetGate(epsilon=2.0, delta=1e-5)
    r = gate.reserve("p", "a", _event())
    gate.commit(r.reservation_id)
    with pytest.raises(ReservationUnknown, match="already committed") as e:
        gate.commit(r.reservation_id)
    assert e.value.code == "LEARNING_RESERVATION_UNKNOWN"
    with pytest.raises(ReservationUnknown):
        gate.abort("nope")


def test_calibration_is_tight_and_history_aware():
    gate = InMemoryBudgetGate(epsilon=4.0, delta=1e-5)
    plan = {"rounds": 5, "steps_per_round": 50, "sample_rate": 0.05, "max_grad_norm": 1.0}
    sigma = gate.calibrate_noise("p", "a", **plan)
    fits = epsilon_of([(sigma, 0.05, 250)], 1e-5)
    assert fits <= 4.0 and epsilon_of([(sigma * 0.99, 0.05, 250)], 1e-5) > 4.0 * 0.99
    r = gate.reserve("p", "a", _event(sigma=sigma, q=0.05, steps=50))
    gate.commit(r.reservation_id)
    later = gate.calibrate_noise("p", "a", **{**plan, "rounds": 4})
    assert later == pytest.approx(sigma, rel=0.01)  # the plan still fits as planned
    other = InMemoryBudgetGate(epsilon=4.0, delta=1e-5)
    other.commit(other.reserve("p", "a", _event(sigma=1.0, q=0.05, steps=20)).reservation_id)
    assert other.calibrate_noise("p", "a", **{**plan, "rounds": 4}) > sigma  # history costs
    extra = gate.calibrate_noise("p", "a", **{**plan, "rounds": 4}, epsilon="0.5")
    assert extra > later  # a smaller extra epsilon needs more noise


def test_calibration_refuses_when_exhausted():
    gate = InMemoryBudgetGate(epsilon=1.0, delta=1e-5)
    gate.commit(gate.reserve("p", "a", _event(sigma=3.0, q=0.1, steps=20)).reservation_id)
    with pytest.raises(BudgetRefused, match="exhausted"):
        gate.calibrate_noise("p", "a", rounds=10, steps_per_round=1000, sample_rate=0.5,
                             max_grad_norm=1.0)


def test_invalid_parameters():
    with pytest.raises(LearningParameterInvalid, match="epsilon"):
        InMemoryBudgetGate(epsilon=0.0, delta=1e-5)
    with pytest.raises(LearningParameterInvalid, match="delta"):
        InMemoryBudgetGate(epsilon=1.0, delta=1.0)
    gate = InMemoryBudgetGate(epsilon=1.0, delta=1e-5)
    with pytest.raises(LearningParameterInvalid, match="rounds >= 1"):
        gate.calibrate_noise("p", "a", rounds=0, steps_per_round=1, sample_rate=0.1,
                             max_grad_norm=1.0)
    with pytest.raises(LearningParameterInvalid, match="epsilon must be"):
        gate.calibrate_noise("p", "a", rounds=1, steps_per_round=1, sample_rate=0.1,
                             max_grad_norm=1.0, epsilon="-1")


def test_set_budget_and_refusal_types():
    gate = InMemoryBudgetGate(epsilon=1.0, delta=1e-5)
    gate.set_budget("p", "a", epsilon=5.0)
    assert gate.budget("p", "a") == 5.0 and gate.budget("p", "b") == 1.0
    assert BudgetRefused in refusal_errors()
    assert reservation_id_of(gate.reserve("p", "a", _event())) != ""
    with pytest.raises(ReservationUnknown, match="no reservation id"):
        reservation_id_of(object())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 3.0), st.integers(1, 400), st.booleans()), max_size=8))
def test_spent_never_exceeds_budget(requests):
    gate = InMemoryBudgetGate(epsilon=3.0, delta=1e-5)
    for sigma, steps, commit in requests:
        try:
            r = gate.reserve("p", "a", _event(sigma=sigma, q=0.02, steps=steps))
        except BudgetRefused:
            continue
        (gate.commit if commit else gate.abort)(r.reservation_id)
        assert gate.epsilon_spent("p", "a") <= 3.0
