"""Noise calibration composes the history with the plan (unlike make_private_with_epsilon)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from privacy_ledger import BudgetExceeded, MechanismEvent, PrivacyLedger
from privacy_ledger.budget.accountant import epsilon
from privacy_ledger.budget.calibration import calibrate
from privacy_ledger.errors import CalibrationImpossible, LedgerParameterInvalid

from ..helpers import event, setup_budget

PLAN = {"rounds": 5, "steps_per_round": 200, "sample_rate": 0.01, "max_grad_norm": 1.0}


def _plan_event(sigma: float) -> MechanismEvent:
    return MechanismEvent(
        noise_multiplier=sigma, sample_rate=0.01, steps=200, delta=1e-5, max_grad_norm=1.0
    )


def _reserve_plan(ledger: PrivacyLedger, sigma: float) -> None:
    for r in range(5):
        ledger.commit(ledger.reserve("h1", "ct", _plan_event(sigma), round_id=f"r{r}").id)


def test_calibrated_noise_fits_and_is_tight(ledger: PrivacyLedger) -> None:
    setup_budget(ledger, "4")
    ledger.commit(ledger.reserve("h1", "ct", event(steps=500)).id)
    sigma = ledger.calibrate_noise("h1", "ct", **PLAN)
    history = [event(steps=500)]
    assert epsilon([*history, *[_plan_event(sigma)] * 5], delta=1e-5, accountant="rdp") <= 4
    tighter = sigma * 0.998  # bisection stops at 0.1 %
    assert epsilon([*history, *[_plan_event(tighter)] * 5], delta=1e-5, accountant="rdp") > 4
    _reserve_plan(ledger, sigma)
    assert ledger.epsilon_spent("h1", "ct") <= 4
    with pytest.raises(BudgetExceeded):
        ledger.reserve("h1", "ct", _plan_event(sigma))


def test_history_makes_more_noise_necessary(ledger: PrivacyLedger) -> None:
    setup_budget(ledger, "4")
    fresh = ledger.calibrate_noise("h1", "ct", **PLAN)
    ledger.commit(ledger.reserve("h1", "ct", event(steps=1000)).id)
    later = ledger.calibrate_noise("h1", "ct", **PLAN)
    assert later > fresh
    # an empty-history calibration (make_private_with_epsilon) would overspend now
    naive = [event(steps=1000), *[_plan_event(fresh)] * 5]
    assert epsilon(naive, delta=1e-5, accountant="rdp") > 4


def test_epsilon_argument_is_extra_spend_capped_by_budget(ledger: PrivacyLedger) -> None:
    setup_budget(ledger, "4")
    ledger.commit(ledger.reserve("h1", "ct", event(steps=500)).id)
    spent = ledger.epsilon_spent("h1", "ct")
    small = ledger.calibrate_noise("h1", "ct", epsilon="0.5", **PLAN)
    total = epsilon([event(steps=500), *[_plan_event(small)] * 5], delta=1e-5, accountant="rdp")
    assert total <= spent + Decimal("0.5")
    capped = ledger.calibrate_noise("h1", "ct", epsilon="100", **PLAN)
    assert capped == ledger.calibrate_noise("h1", "ct", **PLAN)
    assert small > capped


def test_prv_calibration_uses_prv() -> None:
    history = [event(steps=300)]
    sigma = calibrate(
        history,
        target=Decimal(3),
        delta=1e-5,
        accountant="prv",
        rounds=2,
        steps_per_round=500,
        sample_rate=0.01,
        max_grad_norm=1.0,
    )
    plan = [*history, *[_plan_event(sigma)] * 5]  # 2 x 500 steps = 5 x 200 steps
    assert epsilon(plan, delta=1e-5, accountant="prv") <= 3
    assert epsilon(plan, delta=1e-5, accountant="rdp") > 3  # RDP would need more noise


def test_impossible_plans_are_refused() -> None:
    spent = [event(sigma=0.5, q=0.05, steps=5000)]
    with pytest.raises(CalibrationImpossible, match="no noise multiplier"):
        calibrate(spent, target=Decimal("1"), delta=1e-5, accountant="rdp", **PLAN)
    with pytest.raises(LedgerParameterInvalid, match="rounds"):
        calibrate([], target=Decimal("1"), delta=1e-5, accountant="rdp", **{**PLAN, "rounds": 0})
    with pytest.raises(LedgerParameterInvalid, match="sample_rate"):
        calibrate(
            [], target=Decimal("1"), delta=1e-5, accountant="rdp", **{**PLAN, "sample_rate": 1.5}
        )
