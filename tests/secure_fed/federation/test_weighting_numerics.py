"""Weighting under any numbers: nothing raises but the typed error, weights stay a distribution.

Every public function of :mod:`secure_fed.federation.weighting` is fed margins,
scores, counts and factors that include NaN, infinities, ties, zeros, huge and
tiny values, and empty or one-element inputs. Genuinely invalid input (a NaN
evidence, a factor outside ``(0, 1]``, an empty roster, mismatched ids) is
refused with :class:`~secure_fed.errors.WeightingInvalid`; any other exception
is a bug. Valid input gives finite, non-negative weights that sum to 1 and
respect the cap.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secure_fed.errors import WeightingInvalid
from secure_fed.federation.weighting import (
    DynamicWeighting,
    apply_factors,
    base_shares,
    cap_weights,
    check_cap,
    merits,
    sharpen_logits,
    softmax_entropy,
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Any float, with the edge cases drawn often.
EDGES = st.sampled_from(
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        1e-6,
        -1e-6,
        5e-324,
        -5e-324,
        1e-300,
        1e300,
        1.7976931348623157e308,
        -1.7976931348623157e308,
        math.inf,
        -math.inf,
        math.nan,
    ]
)
ANY_FLOAT = st.one_of(EDGES, st.floats(allow_nan=True, allow_infinity=True))
FINITE = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 1e-6, 5e-324, 1e300, -1.7976931348623157e308]),
    st.floats(allow_nan=False, allow_infinity=False),
)
IDS = st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=10)


def _is_distribution(weights: dict[str, float]) -> None:
    values = list(weights.values())
    assert all(math.isfinite(w) and w >= 0 for w in values), weights
    assert math.fsum(values) == pytest.approx(1.0, abs=1e-9), weights


def test_merit_of_a_participant_above_a_zero_reference_does_not_overflow() -> None:
    """The reference (a quantile) at 0 made ``|r|`` 1e-6: one candidate a little above
    it had ``exp(1e6)`` and the whole round failed with ``OverflowError``."""
    reference, merit = merits({"a": 0.0, "b": 0.0, "c": 1.0}, alpha=1.0, floor=0.05)
    assert reference == 0.0 and merit == {"a": 1.0, "b": 1.0, "c": 1.0}
    evidence = {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.2}
    terms = DynamicWeighting(beta=0.0, chance_merit=None).weigh(
        dict.fromkeys("abcd", 1.0), evidence=evidence
    )
    assert {p: t.weight for p, t in terms.items()} == pytest.approx(dict.fromkeys("abcd", 0.25))
    # with the chance rule, evidence at 0 is no better than chance: d alone keeps merit 1
    terms = DynamicWeighting(beta=0.0).weigh(dict.fromkeys("abcd", 1.0), evidence=evidence)
    assert [terms[p].below_chance for p in "abcd"] == [True, True, True, False]
    assert terms["d"].weight == pytest.approx(1 / (1 + 3e-3))


@PROPERTY
@given(
    st.dictionaries(st.sampled_from("abcdefgh"), ANY_FLOAT, max_size=8),
    st.one_of(ANY_FLOAT, st.floats(0, 100)),
    st.one_of(ANY_FLOAT, st.floats(0, 1)),
    st.one_of(ANY_FLOAT, st.floats(0, 1)),
)
def test_merits_raise_only_the_typed_error(
    correctness: dict[str, float], alpha: float, floor: float, quantile: float
) -> None:
    try:
        reference, merit = merits(correctness, alpha=alpha, floor=floor, quantile=quantile)
    except WeightingInvalid:
        valid = (
            correctness
            and all(math.isfinite(c) for c in correctness.values())
            and math.isfinite(alpha)
            and alpha >= 0
            and math.isfinite(floor)
            and 0 < floor <= 1
            and math.isfinite(quantile)
            and 0 <= quantile <= 1
        )
        assert not valid
        return
    assert math.isfinite(reference)
    lo, hi = min(correctness.values()), max(correctness.values())
    assert lo <= reference <= hi
    assert set(merit) == set(correctness)
    assert all(floor <= m <= 1 for m in merit.values())
    assert all(merit[p] == 1.0 for p, c in correctness.items() if c >= reference)


@PROPERTY
@given(IDS, st.dictionaries(st.sampled_from("abcdefghij"), st.integers(-3, 10**400), max_size=10))
def test_base_shares_raise_only_the_typed_error(ids: list[str], registered: dict[str, int]) -> None:
    try:
        shares = base_shares(ids, registered)
    except WeightingInvalid:
        return
    assert set(shares) == set(ids) and ids
    _is_distribution(shares)


@PROPERTY
@given(
    st.dictionaries(st.sampled_from("abcdefgh"), ANY_FLOAT, max_size=8),
    st.dictionaries(st.sampled_from("abcdefgh"), ANY_FLOAT, max_size=8),
)
def test_apply_factors_raises_only_the_typed_error(
    dynamic: dict[str, float], factors: dict[str, float]
) -> None:
    try:
        out = apply_factors(dynamic, factors)
    except WeightingInvalid:
        return
    assert set(out) == set(dynamic) == set(factors)
    _is_distribution(out)


@PROPERTY
@given(st.dictionaries(st.sampled_from("abcdefghij"), ANY_FLOAT, max_size=10), ANY_FLOAT)
def test_cap_weights_raise_only_the_typed_error(weights: dict[str, float], cap: float) -> None:
    try:
        out = cap_weights(weights, cap)
    except WeightingInvalid:
        return
    assert set(out) == set(weights)
    _is_distribution(out)
    assert max(out.values()) <= cap * (1 + 1e-9)


@PROPERTY
@given(st.one_of(ANY_FLOAT, st.integers(-5, 5), st.booleans()), st.integers(-3, 1000))
def test_check_cap_raises_only_the_typed_error(cap: float, participants: int) -> None:
    try:
        check_cap(cap, participants)
    except WeightingInvalid:
        return
    assert 0 < cap <= 1 and participants * cap >= 1 - 1e-12


_PARAMS = st.fixed_dictionaries(
    {
        "alpha": st.one_of(st.sampled_from([0.0, 1.0, 100.0, math.nan]), st.floats(0, 100)),
        "beta": st.one_of(st.sampled_from([0.0, 0.5, 0.999999, 1.0]), st.floats(0, 1)),
        "min_merit": st.one_of(st.sampled_from([5e-324, 1e-300, 0.05, 1.0]), st.floats(0, 1)),
        "quantile": st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0, 1)),
    }
)


@PROPERTY
@given(
    _PARAMS,
    st.integers(1, 8),
    st.data(),
)
def test_weigh_raises_only_the_typed_error_and_publishes_a_capped_distribution(
    params: dict[str, float], n: int, data: st.DataObject
) -> None:
    ids = [f"p{i}" for i in range(n)]
    per = st.fixed_dictionaries
    factors = data.draw(per({p: st.one_of(ANY_FLOAT, st.floats(5e-324, 1)) for p in ids}))
    evidence = data.draw(st.none() | per({p: st.one_of(ANY_FLOAT, FINITE) for p in ids}))
    copies = data.draw(st.none() | per({p: st.integers(0, n - 1) for p in ids}))
    registered = data.draw(
        st.just({}) | per({p: st.one_of(st.integers(1, 10), st.integers(1, 2**53)) for p in ids})
    )
    cap = data.draw(st.one_of(st.just(1.0), st.floats(1 / n, 1), ANY_FLOAT))
    rounds = data.draw(st.integers(1, 3))
    try:
        wt = DynamicWeighting(
            alpha=params["alpha"],
            beta=params["beta"],
            min_merit=params["min_merit"],
            quantile=params["quantile"],
            registered=registered,
        )
    except WeightingInvalid:
        return
    for _ in range(rounds):
        before = dict(wt.history)
        try:
            terms = wt.weigh(factors, max_weight=cap, evidence=evidence, copies=copies)
        except WeightingInvalid:
            assert wt.history == before  # refused: nothing moved
            return
        weights = {p: t.weight for p, t in terms.items()}
        _is_distribution(weights)
        assert max(weights.values()) <= cap * (1 + 1e-9)
        assert all(math.isfinite(v) for v in wt.history.values())
        assert all(math.isfinite(t.merit) and 0 < t.merit <= 1 for t in terms.values())
        # the outlier factor is applied as the policy gave it, whatever the evidence
        assert {p: t.factor for p, t in terms.items()} == factors


@PROPERTY
@given(
    st.lists(st.lists(ANY_FLOAT, min_size=0, max_size=4), min_size=0, max_size=4),
    st.one_of(ANY_FLOAT, st.floats(1e-3, 1)),
)
def test_logit_functions_raise_only_the_typed_error(rows: list[list[float]], t: float) -> None:
    logits = np.array(rows, dtype=object) if len({len(r) for r in rows}) > 1 else np.array(rows)
    try:
        entropy = softmax_entropy(logits)
    except WeightingInvalid:
        pass
    else:
        assert math.isfinite(entropy) and entropy >= 0
    try:
        sharp = sharpen_logits(logits, temperature=t)
    except WeightingInvalid:
        return
    assert sharp.dtype == np.float32 and np.isfinite(sharp).all()
