"""The one-run audit's pure parts: the bound, the score, the guesses, the canaries."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest
from scipy import stats

from secure_fed.errors import LearningParameterInvalid
from secure_fed.federation.audit_record import to_empirical
from secure_fed.learning.privacy_audit import (
    AuditResult,
    AuditSettings,
    CanaryAudit,
    audit_p_value,
    epsilon_lower_bound,
    guess_membership,
    make_canaries,
    membership_scores,
)


@pytest.mark.parametrize("r", [1, 5, 10, 20, 32, 100])
def test_all_correct_without_delta_is_the_closed_form(r: int) -> None:
    # With every guess right, P[Bin(r, q) >= r] = q^r = 0.05 at the bound: q = 0.05^(1/r).
    q = 0.05 ** (1 / r)
    closed = max(0.0, math.log(q / (1 - q)))  # one guess proves nothing at 95%
    assert epsilon_lower_bound(r, r, r, delta=0.0) == pytest.approx(closed, abs=1e-5)


def test_the_p_value_is_the_binomial_tail_plus_the_delta_term() -> None:
    # Independently: m=64, r=32, v=28 at eps=1, delta=1e-5 (the paper's p-value).
    q = math.exp(1) / (1 + math.exp(1))
    tail = sum(math.comb(32, j) * q**j * (1 - q) ** (32 - j) for j in range(28, 33))
    pmf = [math.comb(32, j) * q**j * (1 - q) ** (32 - j) for j in range(32 + 1)]
    alpha = max(sum(pmf[28 - i : 28]) / i for i in range(1, 29))
    expected = tail + alpha * 1e-5 * 2 * 64
    assert audit_p_value(64, 32, 28, epsilon=1.0, delta=1e-5) == pytest.approx(expected, rel=1e-9)
    assert tail == pytest.approx(stats.binom.sf(27, 32, q), rel=1e-9)


def test_the_bound_is_where_the_p_value_crosses_five_percent() -> None:
    bound = epsilon_lower_bound(64, 32, 29, delta=1e-5)
    assert audit_p_value(64, 32, 29, epsilon=bound, delta=1e-5) < 0.05
    assert audit_p_value(64, 32, 29, epsilon=bound + 1e-5, delta=1e-5) >= 0.05


def test_the_bound_grows_with_correct_guesses_and_falls_with_delta() -> None:
    bounds = [epsilon_lower_bound(64, 32, v, delta=1e-5) for v in range(33)]
    assert bounds == sorted(bounds)
    assert bounds[16] == 0.0  # chance level proves nothing
    assert bounds[32] > bounds[31] > bounds[28] > 0
    assert epsilon_lower_bound(64, 32, 32, delta=1e-2) < bounds[32]
    assert epsilon_lower_bound(64, 32, 32, delta=1e-5, confidence=0.99) < bounds[32]


@pytest.mark.parametrize(
    ("m", "r", "v", "delta", "confidence"),
    [
        (10, 11, 5, 1e-5, 0.95),  # more guesses than canaries
        (10, 4, 5, 1e-5, 0.95),  # more correct than guesses
        (10, 4, -1, 1e-5, 0.95),
        (10, 4, 2, 1.5, 0.95),
        (10, 4, 2, float("nan"), 0.95),
        (10, 4, 2, 1e-5, 1.0),
        (10, 4, 2, 1e-5, 0.0),
        (10, 4.0, 2, 1e-5, 0.95),
    ],
)
def test_bad_counts_are_refused_with_a_typed_error(
    m: int, r: int, v: int, delta: float, confidence: float
) -> None:
    with pytest.raises(LearningParameterInvalid):
        epsilon_lower_bound(m, r, v, delta=delta, confidence=confidence)


@pytest.mark.parametrize(
    "over",
    [
        {"canaries": 1},
        {"canaries": True},
        {"guess_fraction": 0.6},
        {"guess_fraction": 0.0},
        {"canaries": 3, "guess_fraction": 0.25},
        {"confidence": 1.0},
    ],
)
def test_bad_settings_are_refused(over: dict[str, object]) -> None:
    with pytest.raises(LearningParameterInvalid):
        AuditSettings(**over)  # type: ignore[arg-type]


def test_scores_rank_a_memorised_label_first_and_ignore_a_uniform_shift() -> None:
    logits = np.zeros((3, 4))
    logits[0, 2] = 5.0  # the model is sure of canary 0's label
    logits[1, 1] = 5.0  # sure of another label than canary 1's
    labels = np.array([2, 3, 0])
    scores = membership_scores(logits, labels)
    assert scores[0] > scores[2] > scores[1]
    assert scores[2] == pytest.approx(0.0)  # uniform prediction: label exchangeable with the rest
    assert membership_scores(logits + 7.0, labels) == pytest.approx(scores)


def test_guesses_take_the_top_and_bottom_k() -> None:
    scores = np.array([0.9, 0.1, 0.5, 0.8, 0.0, 0.3])
    included = np.array([True, False, True, False, False, True])
    # top 2: indices 0 (in, right), 3 (out, wrong); bottom 2: 4 (out, right), 1 (out, right)
    assert guess_membership(scores, included, per_side=2) == (4, 3)
    with pytest.raises(LearningParameterInvalid):
        guess_membership(scores, included, per_side=4)


def test_canaries_stay_in_the_public_range_and_coins_are_fair() -> None:
    public = np.random.default_rng(0).random((50, 1, 4, 4)).astype(np.float32)
    c = make_canaries(4000, public_x=public, num_classes=10)
    low, high = public.min(axis=0), public.max(axis=0)
    assert ((c.x == low) | (c.x == high)).all()
    assert set(np.unique(c.y)) == set(range(10))
    assert abs(c.included.mean() - 0.5) < 0.05  # 4000 fair coins: 5 standard deviations off
    again = make_canaries(4000, public_x=public, num_classes=10)
    assert not np.array_equal(c.included, again.included)  # secrets-seeded, not fixed
    seeded = [make_canaries(8, public_x=public, num_classes=10, seed=3) for _ in range(2)]
    assert np.array_equal(seeded[0].x, seeded[1].x)


def test_training_rows_add_exactly_the_included_canaries() -> None:
    public = np.random.default_rng(1).random((20, 6)).astype(np.float32)
    audit = CanaryAudit(
        make_canaries(16, public_x=public, num_classes=3), AuditSettings(canaries=16), delta=1e-5
    )
    x, y = np.zeros((5, 6), dtype=np.float32), np.zeros(5, dtype=np.int64)
    xs, ys = audit.training_rows(x, y)
    assert len(xs) == len(ys) == 5 + audit.included
    assert np.array_equal(xs[5:], audit.canaries.x[audit.canaries.included])


def test_result_fields_have_no_floats() -> None:
    result = AuditResult(
        participant="p",
        asset="a",
        rounds_from="r1",
        rounds_to="r2",
        canaries=64,
        guesses=32,
        correct=30,
        score="s",
        confidence="0.95",
        delta="0.00001",
        epsilon_lower_bound="1.4889",
        epsilon_accounted="1.0",
    )
    assert not any(isinstance(v, float) for v in result.fields().values())
    assert result.exceeds_accounted
    assert to_empirical(result).epsilon_lower_bound == Decimal("1.4889")
