from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import WeightingInvalid
from secure_fed.federation.weighting import (
    DynamicWeighting,
    apply_factors,
    quality_from_scores,
    sharpen_logits,
    softmax_entropy,
)


def test_alpha_zero_is_sample_count_weighting() -> None:
    w = DynamicWeighting(alpha=0.0, beta=0.0).update({"a": 100, "b": 300}, {"a": 0.1, "b": 0.9})
    assert w == pytest.approx({"a": 0.25, "b": 0.75})


def test_quality_raises_weight_through_the_softmax() -> None:
    wt = DynamicWeighting(alpha=2.0, beta=0.0)
    w = wt.instant({"a": 1, "b": 1}, {"a": 1.0, "b": 0.0})
    ea, eb = np.exp(2.0), np.exp(0.0)
    assert w["a"] == pytest.approx(ea / (ea + eb))


def test_ema_smooths_across_rounds() -> None:
    wt = DynamicWeighting(alpha=5.0, beta=0.5)
    first = wt.update({"a": 1, "b": 1}, {"a": 0.5, "b": 0.5})
    assert first == pytest.approx({"a": 0.5, "b": 0.5})
    second = wt.update({"a": 1, "b": 1}, {"a": 1.0, "b": 0.0})
    instant = DynamicWeighting(alpha=5.0, beta=0.0).instant({"a": 1, "b": 1}, {"a": 1.0, "b": 0.0})
    assert second["a"] == pytest.approx(0.5 * 0.5 + 0.5 * instant["a"])
    assert 0.5 < second["a"] < instant["a"]


def test_new_participant_and_dropout_renormalise() -> None:
    wt = DynamicWeighting(beta=0.9)
    wt.update({"a": 1, "b": 1}, {"a": 0.5, "b": 0.5})
    w = wt.update({"a": 1, "c": 1}, {"a": 0.5, "c": 0.5})
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
        DynamicWeighting(**kwargs)


def test_inputs_validated() -> None:
    wt = DynamicWeighting()
    with pytest.raises(WeightingInvalid, match="empty"):
        wt.update({}, {})
    with pytest.raises(WeightingInvalid, match="different participants"):
        wt.update({"a": 1}, {"b": 0.5})
    with pytest.raises(WeightingInvalid, match="sample count"):
        wt.update({"a": 0}, {"a": 0.5})
    with pytest.raises(WeightingInvalid, match="quality"):
        wt.update({"a": 1}, {"a": 2.0})


def test_factor_multiplies_the_dynamic_weight() -> None:
    assert apply_factors({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.25}) == pytest.approx(
        {"a": 0.8, "b": 0.2}
    )
    wt = DynamicWeighting(alpha=5.0, beta=0.5)
    counts, scores = {"a": 100, "b": 300, "c": 200}, {"a": 2.0, "b": 3.0, "c": 12.0}
    terms = wt.weigh(counts, scores, {"a": 1.0, "b": 1.0, "c": 0.1})
    plain = DynamicWeighting(alpha=5.0, beta=0.5).update(counts, quality_from_scores(scores))
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
        wt.weigh({"a": 1, "b": 1}, {"a": 1.0, "b": 2.0}, factors)
    assert wt.history == {}


def test_sharpening_reduces_entropy() -> None:
    z = np.random.default_rng(0).normal(size=(50, 10)).astype(np.float32)
    assert softmax_entropy(sharpen_logits(z, temperature=0.5)) < softmax_entropy(z)
    np.testing.assert_array_equal(sharpen_logits(z, temperature=1.0), z)
    with pytest.raises(WeightingInvalid, match="temperature"):
        sharpen_logits(z, temperature=0.0)
