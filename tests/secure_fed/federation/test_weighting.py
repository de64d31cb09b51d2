from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import WeightingInvalid
from secure_fed.federation.weighting import (
    DynamicWeighting,
    apply_factors,
    base_shares,
    cap_weights,
    sharpen_logits,
    softmax_entropy,
)
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy


def test_alpha_zero_is_equal_weighting() -> None:
    terms = DynamicWeighting(alpha=0.0, beta=0.0).weigh(
        {"a": 1.0, "b": 1.0}, evidence={"a": 0.1, "b": 5.0}
    )
    assert {p: t.weight for p, t in terms.items()} == pytest.approx({"a": 0.5, "b": 0.5})


def test_merit_is_a_softmax_relative_to_the_median_capped_at_one() -> None:
    terms = DynamicWeighting(alpha=2.0, beta=0.0, quantile=0.5).weigh(
        dict.fromkeys("abc", 1.0), evidence={"a": 3.0, "b": 2.0, "c": 1.5}
    )
    assert terms["a"].merit == terms["b"].merit == 1.0  # above the median: no reward beyond 1
    assert terms["c"].merit == pytest.approx(np.exp(2.0 * -0.5 / 2.0))  # relative to |median|
    total = 2 + np.exp(-0.5)
    assert terms["a"].weight == pytest.approx(1 / total)
    assert terms["c"].weight == pytest.approx(np.exp(-0.5) / total)


def test_default_reference_is_the_lower_quartile() -> None:
    """Only the clearly less right lose weight; three at the top move the reference little."""
    evidence = {"a": 1.0, "b": 2.0, "c": 2.1, "d": 2.2, "e": 2.3}
    terms = DynamicWeighting(beta=0.0).weigh(dict.fromkeys(evidence, 1.0), evidence=evidence)
    assert [terms[p].merit for p in "bcde"] == [1.0] * 4
    assert terms["a"].merit == pytest.approx(np.exp(-1.0 / 2.0))
    boosted = {**evidence, "c": 9.0, "d": 9.0, "e": 9.0}  # a minority shows huge evidence
    after = DynamicWeighting(beta=0.0).weigh(dict.fromkeys(evidence, 1.0), evidence=boosted)
    assert after["b"].merit == 1.0


def test_merit_does_not_depend_on_the_logit_scale() -> None:
    evidence = {"a": 3.0, "b": 2.0, "c": 1.5}
    small = DynamicWeighting(beta=0.0).weigh(dict.fromkeys("abc", 1.0), evidence=evidence)
    large = DynamicWeighting(beta=0.0).weigh(
        dict.fromkeys("abc", 1.0), evidence={p: 4 * e for p, e in evidence.items()}
    )
    assert {p: t.merit for p, t in small.items()} == pytest.approx(
        {p: t.merit for p, t in large.items()}
    )


def test_ema_smooths_the_evidence_across_rounds() -> None:
    wt = DynamicWeighting(alpha=1.0, beta=0.5, quantile=0.5)
    wt.weigh(dict.fromkeys("ab", 1.0), evidence={"a": 2.0, "b": 2.0})
    terms = wt.weigh(dict.fromkeys("ab", 1.0), evidence={"a": 2.0, "b": 0.5})
    assert terms["b"].correctness == pytest.approx(1.25) and wt.history["b"] == pytest.approx(1.25)
    assert terms["b"].evidence == 0.5 and not terms["b"].below_chance
    # median of (2, 1.25) is 1.625: b's merit exp(-0.375 / 1.625), not the instant exp(-0.6)
    assert terms["b"].merit == pytest.approx(np.exp(-0.375 / 1.625))


def test_new_participant_and_dropout_renormalise() -> None:
    wt = DynamicWeighting(beta=0.9)
    wt.weigh(dict.fromkeys("ab", 1.0), evidence={"a": 1.0, "b": 1.0})
    terms = wt.weigh(dict.fromkeys("ac", 1.0), evidence={"a": 1.0, "c": 3.0})
    assert sum(t.weight for t in terms.values()) == pytest.approx(1.0) and set(terms) == {"a", "c"}
    assert terms["c"].correctness == 3.0  # a newcomer starts from its evidence


def test_registered_counts_give_the_base_share() -> None:
    wt = DynamicWeighting(registered={"a": 300, "b": 100, "c": 100})
    terms = wt.weigh(dict.fromkeys("abc", 1.0))
    assert {p: t.base for p, t in terms.items()} == pytest.approx({"a": 0.6, "b": 0.2, "c": 0.2})
    assert terms["a"].weight == pytest.approx(0.6) and terms["a"].merit == 1.0
    assert base_shares(["x", "y"], {}) == {"x": 0.5, "y": 0.5}
    with pytest.raises(WeightingInvalid, match="no registered sample count"):
        wt.weigh(dict.fromkeys("abd", 1.0))


def test_copies_share_one_weight() -> None:
    terms = DynamicWeighting().weigh(
        dict.fromkeys("abcd", 1.0), copies={"a": 0, "b": 1, "c": 1, "d": 0}
    )
    assert terms["b"].weight + terms["c"].weight == pytest.approx(terms["a"].weight)
    assert terms["b"].copy_factor == 0.5


@pytest.mark.parametrize(
    ("kwargs", "fragment"), [({"alpha": -1.0}, "alpha"), ({"beta": 1.0}, "beta")]
)
def test_parameters_validated(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(WeightingInvalid, match=fragment):
        DynamicWeighting(**kwargs)  # type: ignore[arg-type]


def test_inputs_validated() -> None:
    wt = DynamicWeighting()
    with pytest.raises(WeightingInvalid, match="no participant"):
        wt.weigh({})
    with pytest.raises(WeightingInvalid, match="evidence and factors"):
        wt.weigh({"a": 1.0}, evidence={"b": 0.5})
    with pytest.raises(WeightingInvalid, match="evidence of 'a' must be finite"):
        wt.weigh({"a": 1.0}, evidence={"a": float("nan")})
    with pytest.raises(WeightingInvalid, match="copies of 'a'"):
        wt.weigh({"a": 1.0, "b": 1.0}, copies={"a": 2, "b": 0})
    with pytest.raises(WeightingInvalid, match="quantile"):
        DynamicWeighting(quantile=1.5)
    with pytest.raises(WeightingInvalid, match="min_merit"):
        DynamicWeighting(min_merit=0.0)
    with pytest.raises(WeightingInvalid, match="registered sample count of 'a'"):
        DynamicWeighting(registered={"a": 0})


def test_factor_only_lowers_the_weight() -> None:
    assert apply_factors({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.25}) == pytest.approx(
        {"a": 0.8, "b": 0.2}
    )
    terms = DynamicWeighting().weigh({"a": 1.0, "b": 1.0, "c": 0.1})  # no evidence: applies
    assert terms["c"].weight == pytest.approx(0.1 / 2.1)
    assert terms["a"].weight == pytest.approx(1 / 2.1)
    assert sum(t.weight for t in terms.values()) == pytest.approx(1.0)


def test_closeness_lowers_the_weight_whatever_the_evidence() -> None:
    """Being right on the labeled slice does not cancel the outlier factor.

    An upload right on the ~100 slice rows and poisoned on the rest has the top
    evidence; it used to keep its full base share (the factor was waived at or
    above the median evidence). The factor now always applies; the evidence
    only sets the merit.
    """
    factors = {"a": 1.0, "b": 1.0, "far_right": 0.1, "far_wrong": 0.1}
    evidence = {"a": 2.0, "b": 2.0, "far_right": 2.5, "far_wrong": 1.9}
    terms = DynamicWeighting(beta=0.0).weigh(factors, evidence=evidence)
    assert terms["far_right"].factor == terms["far_wrong"].factor == 0.1
    assert terms["far_right"].weight == pytest.approx(0.1 * terms["a"].weight)
    assert terms["far_wrong"].weight < terms["far_right"].weight


def test_a_flagged_participant_with_the_top_evidence_keeps_its_downweight() -> None:
    """The real outlier policy flags one upload; its slice evidence is the best of all."""
    policy = OutlierPolicy(dof=9, config=OutlierConfig(exclude=False, dispersion=False))
    scores = {"h1": 8.0, "h2": 9.0, "h3": 10.0, "h4": 9.5, "slice_gamer": 60.0}
    decisions = policy.decide(scores, round_id=1)
    assert decisions["slice_gamer"].action == "downweight"
    f = decisions["slice_gamer"].factor
    assert 0 < f < 1 and all(decisions[p].factor == 1.0 for p in ("h1", "h2", "h3", "h4"))
    evidence = {"h1": 2.0, "h2": 2.1, "h3": 1.9, "h4": 2.0, "slice_gamer": 9.0}
    terms = DynamicWeighting(beta=0.0).weigh(
        {p: d.factor for p, d in decisions.items()}, evidence=evidence
    )
    gamer = terms["slice_gamer"]
    assert gamer.factor == f and gamer.merit == 1.0
    honest = sum(t.base * t.merit for p, t in terms.items() if p != "slice_gamer")
    assert gamer.weight == pytest.approx(gamer.base * f / (honest + gamer.base * f))
    assert gamer.weight < min(t.weight for p, t in terms.items() if p != "slice_gamer")


@pytest.mark.parametrize(
    ("factors", "fragment"),
    [
        ({"a": 1.0, "b": 0.0}, "factor of 'b' must be in \\(0, 1\\]"),
        ({"a": 1.0, "b": 1.5}, "factor of 'b'"),
        ({"a": 1.0, "b": float("nan")}, "factor of 'b'"),
        ({"a": 1.0}, "evidence and factors name different participants"),
    ],
)
def test_bad_factors_are_refused_before_the_history_moves(
    factors: dict[str, float], fragment: str
) -> None:
    wt = DynamicWeighting()
    with pytest.raises(WeightingInvalid, match=fragment):
        wt.weigh(factors, evidence={"a": 1.0, "b": 2.0})
    assert wt.history == {}


def test_sharpening_reduces_entropy() -> None:
    z = np.random.default_rng(0).normal(size=(50, 10)).astype(np.float32)
    assert softmax_entropy(sharpen_logits(z, temperature=0.5)) < softmax_entropy(z)
    np.testing.assert_array_equal(sharpen_logits(z, temperature=1.0), z)
    with pytest.raises(WeightingInvalid, match="temperature"):
        sharpen_logits(z, temperature=0.0)


def test_declared_sample_counts_do_not_move_weights() -> None:
    """Weights are a function of what the servers check: registered counts, evidence, factors."""
    terms = DynamicWeighting().weigh({"a": 1.0, "b": 1.0})
    assert terms["a"].weight == terms["b"].weight == pytest.approx(0.5)


@pytest.mark.parametrize("cap", [0.2, 0.25, 0.3, 0.5, 1.0])
def test_cap_water_filling_keeps_every_weight_under_the_cap(cap: float) -> None:
    rng = np.random.default_rng(int(cap * 100))
    for _ in range(200):
        n = int(rng.integers(int(np.ceil(1 / cap - 1e-9)), 12))
        raw = {f"p{i}": float(w) for i, w in enumerate(rng.lognormal(0, 3, size=n))}
        capped = cap_weights(raw, cap)
        assert max(capped.values()) <= cap
        assert sum(capped.values()) == pytest.approx(1.0, abs=1e-12)
        free = [p for p, w in capped.items() if w < cap]
        if len(free) >= 2:  # uncapped weights keep their ratios
            a, b = free[:2]
            assert capped[a] / capped[b] == pytest.approx(raw[a] / raw[b], rel=1e-9)
        order = sorted(raw, key=raw.__getitem__)
        assert [capped[p] for p in order] == sorted(capped.values())


def test_cap_takes_weight_from_a_dominant_participant() -> None:
    capped = cap_weights({"big": 1000.0, "a": 1.0, "b": 3.0, "c": 4.0}, 0.3)
    assert capped["big"] == 0.3
    # big capped first (lambda 0.7 / 8 would give c 0.35), then c: a and b share 0.4 as 1:3
    assert capped == pytest.approx({"big": 0.3, "a": 0.1, "b": 0.3, "c": 0.3})
    assert cap_weights({"a": 5.0, "b": 1.0}, 0.5) == pytest.approx({"a": 0.5, "b": 0.5})


def test_weigh_applies_the_cap_and_records_it() -> None:
    wt = DynamicWeighting(registered={"big": 700, "a": 100, "b": 100, "c": 100})
    factors = dict.fromkeys(["big", "a", "b", "c"], 1.0)
    assert wt.weigh(factors)["big"].weight == pytest.approx(0.7)
    terms = wt.weigh(factors, max_weight=0.3)
    assert terms["big"].weight == 0.3 and all(t.max_weight == 0.3 for t in terms.values())
    assert max(t.weight for t in terms.values()) <= 0.3
    assert sum(t.weight for t in terms.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("cap", "n", "fragment"),
    [(0.0, 3, "in \\(0, 1\\]"), (1.5, 3, "in \\(0, 1\\]"), (0.3, 3, ">= 1/3"), (0.2, 4, ">= 1/4")],
)
def test_unsatisfiable_caps_are_refused(cap: float, n: int, fragment: str) -> None:
    wt = DynamicWeighting()
    evidence = {f"p{i}": 1.0 + i for i in range(n)}
    with pytest.raises(WeightingInvalid, match=fragment):
        wt.weigh(dict.fromkeys(evidence, 1.0), max_weight=cap, evidence=evidence)
    assert wt.history == {}
