from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import WeightingInvalid
from secure_fed.federation.weighting import (
    DynamicWeighting,
    quality_from_scores,
    sharpen_logits,
    softmax_entropy,
)


def test_alpha_zero_is_sample_count_weighting() -> None:
    w = DynamicWeighting(alpha=0.0, beta=0.0).update({"a": 100, "b": 300}, {"a": 0.1, "b": 0.9})
    assert w == pytest.approx({"a": 0.25, "b": 0.75})


def test_quality_raises_weight_and_formula_matches_seed() -> None:
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


def test_sharpening_reduces_entropy() -> None:
    z = np.random.default_rng(0).normal(size=(50, 10)).astype(np.float32)
    assert softmax_entropy(sharpen_logits(z, temperature=0.5)) < softmax_entropy(z)
    np.testing.assert_array_equal(sharpen_logits(z, temperature=1.0), z)
    with pytest.raises(WeightingInvalid, match="temperature"):
        sharpen_logits(z, temperature=0.0)
