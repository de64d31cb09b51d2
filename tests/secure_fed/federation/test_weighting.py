from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import WeightingInvalid
from secure_fed.federation.weighting import (
    DynamicWeighting,
    apply_factors,
    cap_weights,
    quality_from_scores,
    sharpen_logits,
    softmax_entropy,
)


def test_alpha_zero_is_equal_weighting() -> None:
    w = DynamicWeighting(alpha=0.0, beta=0.0).update({"a": 0.1, "b": 0.9})
    assert w == pytest.approx({"a": 0.5, "b": 0.5})


def test_quality_raises_weight_through_the_softmax() -> None:
    wt = DynamicWeighting(alpha=2.0, beta=0.0)
    w = wt.instant({"a": 1.0, "b": 0.0})
    ea, eb = np.exp(2.0), np.exp(0.0)
    assert w["a"] == pytest.approx(ea / (ea + eb))


def test_ema_smooths_across_rounds() -> None:
    wt = DynamicWeighting(alpha=5.0, beta=0.5)
    first = wt.update({"a": 0.5, "b": 0.5})
    assert first == pytest.approx({"a": 0.5, "b": 0.5})
    second = wt.update({"a": 1.0, "b": 0.0})
    instant = DynamicWeighting(alpha=5.0, beta=0.0).instant({"a": 1.0, "b": 0.0})
    assert second["a"] == pytest.approx(0.5 * 0.5 + 0.5 * instant["a"])
    assert 0.5 < second["a"] < instant["a"]


def test_new_participant_and_dropout_renormalise() -> None:
    wt = DynamicWeighting(beta=0.9)
    wt.update({"a": 0.5, "b": 0.5})
    w = wt.update({"a": 0.5, "c": 0.5})
    assert sum(w.values()) == pytest.approx(1.0) and set(w) == {"a", "c"}


def test_quality_from_scores() -> None:
    q = quality_from_scores({"a": 1.0, "b": 1.0, "c": 100.0})
    assert q["a"] == pytest.approx(0.5) and q["c"] < 0.02
    assert quality_from_scores({"a": 0.0, "b": 0.0}) == {"a": 1.0, "b": 1.0}
    with pytest.raises(WeightingInvalid, match="score of 'a'"):
        quality_from_scores({"a": -1.0})


@pytest.mark.parametrize(
    ("kwargs", "fragment"), [({"alpha": -1.0}, "alpha"), ({"beta": 1.0}, "beta")]
)
def test_parameters_validated(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(WeightingInvalid, match=fragment):
        DynamicWeighting(**kwargs)  # type: ignore[arg-type]


def test_inputs_validated() -> None:
    wt = DynamicWeighting()
    with pytest.raises(WeightingInvalid, match="empty"):
        wt.update({})
    with pytest.raises(WeightingInvalid, match="different participants"):
        wt.weigh({"a": 1.0}, {"b": 0.5})
    with pytest.raises(WeightingInvalid, match="quality"):
        wt.update({"a": 2.0})


def test_factor_multiplies_the_dynamic_weight() -> None:
    assert apply_factors({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.25}) == pytest.approx(
        {"a": 0.8, "b": 0.2}
    )
    wt = DynamicWeighting(alpha=5.0, beta=0.5)
    scores = {"a": 2.0, "b": 3.0, "c": 12.0}
    terms = wt.weigh(scores, {"a": 1.0, "b": 1.0, "c": 0.1})
    plain = DynamicWeighting(alpha=5.0, beta=0.5).update(quality_from_scores(scores))
    assert {p: t.dynamic for p, t in terms.items()} == pytest.approx(plain)
    assert wt.history == pytest.approx(plain)  # the EMA keeps the weight before the factor
    assert terms["c"].quality == pytest.approx(1 / (1 + 12.0 / 3.0))
    total = plain["a"] + plain["b"] + 0.1 * plain["c"]
    assert terms["c"].weight == pytest.approx(0.1 * plain["c"] / total)
    assert sum(t.weight for t in terms.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("factors", "fragment"),
    [
        ({"a": 1.0, "b": 0.0}, "factor of 'b' must be in \\(0, 1\\]"),
        ({"a": 1.0, "b": 1.5}, "factor of 'b'"),
        ({"a": 1.0, "b": float("nan")}, "factor of 'b'"),
        ({"a": 1.0}, "different participants"),
    ],
)
def test_bad_factors_are_refused_before_the_history_moves(
    factors: dict[str, float], fragment: str
) -> None:
    wt = DynamicWeighting()
    with pytest.raises(WeightingInvalid, match=fragment):
        wt.weigh({"a": 1.0, "b": 2.0}, factors)
    assert wt.history == {}


def test_sharpening_reduces_entropy() -> None:
    z = np.random.default_rng(0).normal(size=(50, 10)).astype(np.float32)
    assert softmax_entropy(sharpen_logits(z, temperature=0.5)) < softmax_entropy(z)
    np.testing.assert_array_equal(sharpen_logits(z, temperature=1.0), z)
    with pytest.raises(WeightingInvalid, match="temperature"):
        sharpen_logits(z, temperature=0.0)


def test_declared_sample_counts_do_not_move_weights() -> None:
    """Weights are a function of what the servers check: scores, factors, the cap."""
    terms = DynamicWeighting().weigh({"a": 2.0, "b": 2.0}, {"a": 1.0, "b": 1.0})
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
    scores = {"near": 0.01, "a": 5.0, "b": 6.0, "c": 7.0}  # near the centre: high quality
    uncapped = DynamicWeighting(beta=0.0).weigh(scores, dict.fromkeys(scores, 1.0))
    assert uncapped["near"].weight > 0.4
    terms = DynamicWeighting(beta=0.0).weigh(scores, dict.fromkeys(scores, 1.0), max_weight=0.3)
    assert terms["near"].weight == 0.3 and all(t.max_weight == 0.3 for t in terms.values())
    assert max(t.weight for t in terms.values()) <= 0.3
    assert sum(t.weight for t in terms.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("cap", "n", "fragment"),
    [(0.0, 3, "in \\(0, 1\\]"), (1.5, 3, "in \\(0, 1\\]"), (0.3, 3, ">= 1/3"), (0.2, 4, ">= 1/4")],
)
def test_unsatisfiable_caps_are_refused(cap: float, n: int, fragment: str) -> None:
    wt = DynamicWeighting()
    scores = {f"p{i}": 1.0 + i for i in range(n)}
    with pytest.raises(WeightingInvalid, match=fragment):
        wt.weigh(scores, dict.fromkeys(scores, 1.0), max_weight=cap)
    assert wt.history == {}
