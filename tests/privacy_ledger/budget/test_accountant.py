"""Accounting pinned to Opacus and to the known answers of docs/audit/ledger.md."""

from __future__ import annotations

from decimal import Decimal

import pytest
from opacus.accountants import PRVAccountant, RDPAccountant

from privacy_ledger.budget.accountant import (
    ACCOUNTANTS,
    EPSILON_QUANTUM,
    compose,
    epsilon,
    round_up,
)
from privacy_ledger.errors import AccountantNotAllowed

from ..helpers import event

DELTA = 1e-5


@pytest.mark.parametrize(("name", "expected"), [("rdp", "2.1014"), ("prv", "1.8384")])
def test_known_answer_single_run(name: str, expected: str) -> None:
    eps = epsilon([event(1.0, 0.01, 1000)], delta=DELTA, accountant=name)
    assert eps.quantize(Decimal("0.0001")) == Decimal(expected)


def test_twenty_rounds_compose_not_sum() -> None:
    rounds = [event(1.0, 0.01, 500) for _ in range(20)]
    composed = epsilon(rounds, delta=DELTA, accountant="rdp")
    assert composed.quantize(Decimal("0.01")) == Decimal("6.71")
    summed = 20 * epsilon(rounds[:1], delta=DELTA, accountant="rdp")
    assert summed.quantize(Decimal("0.1")) == Decimal("33.1")
    assert composed < summed


def _history() -> list:
    return [
        event(1.0, 0.01, 300),
        event(1.3, 0.02, 200),
        event(1.0, 0.01, 150),
        event(0.9, 0.005, 400),
    ]


def test_rdp_pinned_to_opacus_accountant() -> None:
    opacus = RDPAccountant()
    for e in _history():
        for _ in range(e.steps):
            opacus.step(noise_multiplier=e.noise_multiplier, sample_rate=e.sample_rate)
    theirs = opacus.get_epsilon(DELTA)
    ours = epsilon(_history(), delta=DELTA, accountant="rdp")
    assert ours >= Decimal(theirs)
    assert ours - Decimal(theirs) <= EPSILON_QUANTUM + Decimal("1e-12")


def test_prv_pinned_to_opacus_accountant() -> None:
    opacus = PRVAccountant()
    opacus.history = [(e.noise_multiplier, e.sample_rate, e.steps) for e in _history()]
    theirs = opacus.get_epsilon(DELTA)
    ours = epsilon(_history(), delta=DELTA, accountant="prv")
    # we merge equal (sigma, q) entries; PRV's discretisation moves by < its eps_error
    assert abs(ours - Decimal(theirs)) < Decimal("0.01")


def test_compose_merges_equal_mechanisms_in_any_order() -> None:
    assert compose(_history()) == [(1.0, 0.01, 450), (1.3, 0.02, 200), (0.9, 0.005, 400)]
    assert compose([]) == []
    assert epsilon([], delta=DELTA, accountant="rdp") == 0


def test_rounding_is_upwards_and_infinite_stays_infinite() -> None:
    assert round_up(1.0000000001) == Decimal("1.000000001")
    assert round_up(2.0) == Decimal("2.000000000")
    assert round_up(float("inf")) == Decimal("Infinity")
    assert round_up(float("nan")) == Decimal("Infinity")


@pytest.mark.parametrize("name", ["gdp", "GDP", "moments", ""])
def test_refused_accountants_list_the_registry(name: str) -> None:
    with pytest.raises(AccountantNotAllowed, match="allowed: prv, rdp") as info:
        epsilon([event()], delta=DELTA, accountant=name)
    assert info.value.code == "LEDGER_ACCOUNTANT_NOT_ALLOWED"
    assert sorted(ACCOUNTANTS) == ["prv", "rdp"]


def test_gdp_refusal_says_why() -> None:
    with pytest.raises(AccountantNotAllowed, match="underestimate"):
        epsilon([event()], delta=DELTA, accountant="gdp")


def test_prv_falls_back_to_rdp_instead_of_allocating_gigabytes() -> None:
    tiny = [event(sigma=0.05, q=0.01, steps=1000)]
    assert epsilon(tiny, delta=DELTA, accountant="prv") == epsilon(
        tiny, delta=DELTA, accountant="rdp"
    )


def test_rdp_orders_are_opacus_defaults() -> None:
    from privacy_ledger.budget.accountant import RDP_ORDERS

    assert list(RDP_ORDERS) == [float(a) for a in RDPAccountant.DEFAULT_ALPHAS]
