"""The chance rule: a participant no better than chance on the labelled slice keeps no weight.

The jitter coalition of :mod:`secure_fed.evaluation.adaptive` under label skew,
reduced to the terms :meth:`DynamicWeighting.weigh` sees (the figures of one
measured round): three honest participants kept at factor 1, four honest ones
the coalition pushed out of the robust subset at the policy's smallest factor
0.05, and three colluders at factor 1 with negative evidence, under the cap
1/5. With the soft merit alone the colluders' merit is about 0.5 (the lower
quartile of the evidence is theirs) and the cap spreads the weight the kept
three cannot take over everybody below it: here the coalition holds over a
third of the weight, in the end-to-end runs 0.55 to 0.60. The chance rule caps
their merit at ``CHANCE_MERIT`` and that weight goes to the honest participants.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from secure_fed.errors import WeightingInvalid
from secure_fed.federation.weighting import CHANCE_MERIT, DynamicWeighting, below_chance

KEPT, PUSHED, COALITION = ("h1", "h3", "h7"), ("h2", "h4", "h5", "h6"), ("a8", "a9", "a10")
FACTORS = {
    **dict.fromkeys(KEPT, 1.0),
    **dict.fromkeys(PUSHED, 0.05),
    **dict.fromkeys(COALITION, 1.0),
}
# round-1 evidence of the measured run (seed 0, Dirichlet 0.5)
EVIDENCE = {
    "h1": 0.08,
    "h2": 0.63,
    "h3": 0.10,
    "h4": 0.66,
    "h5": 0.30,
    "h6": 0.79,
    "h7": 0.13,
    "a8": -0.36,
    "a9": -0.33,
    "a10": -0.32,
}
CAP = 0.2


def _held(wt: DynamicWeighting, evidence: dict[str, float]) -> float:
    terms = wt.weigh(FACTORS, max_weight=CAP, evidence=evidence)
    return math.fsum(terms[p].weight for p in COALITION)


def test_the_soft_merit_alone_leaves_the_coalition_the_cap_leak() -> None:
    """What the rule fixes: without it the colluders hold over a third of the weight."""
    assert _held(DynamicWeighting(chance_merit=None), EVIDENCE) > 0.35


def test_a_coalition_below_chance_holds_almost_no_weight() -> None:
    wt = DynamicWeighting()
    terms = wt.weigh(FACTORS, max_weight=CAP, evidence=EVIDENCE)
    for pid in COALITION:
        assert terms[pid].below_chance and terms[pid].merit <= CHANCE_MERIT
    assert not any(terms[p].below_chance for p in (*KEPT, *PUSHED))
    # each colluder gets m_chance / min_factor = 1/50 of a pushed-out honest weight
    assert math.fsum(terms[p].weight for p in COALITION) < 0.01
    # the weight the kept three cannot take goes to the honest ones the coalition pushed out
    assert math.fsum(terms[p].weight for p in PUSHED) > 0.39
    assert all(terms[p].weight == pytest.approx(CAP) for p in KEPT)


def test_a_clean_history_does_not_carry_a_participant_through_its_first_bad_round() -> None:
    """The EMA of a clean history is still positive; this round's evidence decides too."""
    wt = DynamicWeighting(beta=0.5)
    clean = {p: 1.0 for p in EVIDENCE}
    wt.weigh(FACTORS, max_weight=CAP, evidence=clean)
    turned = {**clean, **dict.fromkeys(COALITION, -0.5)}
    terms = wt.weigh(FACTORS, max_weight=CAP, evidence=turned)
    assert all(terms[p].correctness == pytest.approx(0.25) for p in COALITION)  # EMA > 0
    assert all(terms[p].below_chance and terms[p].merit <= CHANCE_MERIT for p in COALITION)


def test_evidence_at_zero_is_no_better_than_chance_and_the_rule_is_a_cap() -> None:
    flags = below_chance({"a": 0.0, "b": 1.0, "c": 2.0}, {"a": 1.0, "b": -0.0, "c": 1e-300})
    assert flags == {"a": True, "b": True, "c": False}
    # a merit already below m_chance is not raised to it
    wt = DynamicWeighting(min_merit=1e-6, alpha=100.0, chance_merit=0.5)
    terms = wt.weigh(dict.fromkeys("abcd", 1.0), evidence={"a": -5.0, "b": 1, "c": 1, "d": 1})
    assert terms["a"].below_chance and terms["a"].merit == pytest.approx(1e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, 1.5, math.nan, math.inf, True])
def test_a_bad_chance_merit_is_refused(bad: object) -> None:
    with pytest.raises(WeightingInvalid, match="chance_merit"):
        DynamicWeighting(chance_merit=bad)  # type: ignore[arg-type]


def test_below_chance_refuses_mismatched_or_non_finite_input() -> None:
    with pytest.raises(WeightingInvalid, match="different participants"):
        below_chance({"a": 1.0}, {"b": 1.0})
    with pytest.raises(WeightingInvalid, match="finite"):
        below_chance({"a": math.nan}, {"a": 1.0})


PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ANY = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.0, -0.0, 5e-324, -5e-324, 1e-300, 1.7976931348623157e308, math.inf, -math.inf, math.nan]
)


@PROPERTY
@given(
    st.dictionaries(st.sampled_from("abcdef"), st.tuples(ANY, ANY), min_size=1, max_size=6),
    st.booleans(),
)
def test_below_chance_raises_only_the_typed_error(
    values: dict[str, tuple[float, float]], mismatch: bool
) -> None:
    smoothed = {p: c for p, (c, _) in values.items()}
    evidence = {p: e for p, (_, e) in values.items()}
    if mismatch:
        evidence["z"] = 0.0
    try:
        flags = below_chance(smoothed, evidence)
    except WeightingInvalid:
        return
    assert flags == {p: min(c, e) <= 0 for p, (c, e) in values.items()}


@PROPERTY
@given(
    st.one_of(st.none(), ANY, st.floats(1e-300, 1)),
    st.integers(1, 8),
    st.data(),
)
def test_the_chance_rule_raises_nothing_but_the_typed_error_and_never_raises_a_merit(
    chance: float | None, n: int, data: st.DataObject
) -> None:
    ids = [f"p{i}" for i in range(n)]
    per = st.fixed_dictionaries
    factors = data.draw(per({p: st.floats(1e-3, 1) for p in ids}))
    rounds = [data.draw(per({p: ANY | st.floats(-3, 3) for p in ids})) for _ in range(2)]
    cap = data.draw(st.floats(1 / n, 1))
    try:
        wt = DynamicWeighting(chance_merit=chance)
    except WeightingInvalid:
        return
    soft = DynamicWeighting(chance_merit=None)
    for evidence in rounds:
        try:
            terms = wt.weigh(factors, max_weight=cap, evidence=evidence)
        except WeightingInvalid:
            return
        plain = soft.weigh(factors, max_weight=cap, evidence=evidence)
        weights = [t.weight for t in terms.values()]
        assert all(math.isfinite(w) and w >= 0 for w in weights)
        assert math.fsum(weights) == pytest.approx(1.0, abs=1e-9)
        assert max(weights) <= cap * (1 + 1e-9)
        for p in ids:
            assert 0 < terms[p].merit <= plain[p].merit  # a cap on the merit, never a raise
            if not terms[p].below_chance:
                assert terms[p].merit == plain[p].merit
