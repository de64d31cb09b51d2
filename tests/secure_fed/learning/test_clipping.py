"""Per-model clipping norms: C_k = C_ref * sqrt(P_k / P_ref), flat and per layer."""

import math

import pytest
from torch import nn

from secure_fed.errors import LearningParameterInvalid
from secure_fed.learning.clipping import P_REF, clipping_norm, per_layer_clipping_norms
from secure_fed.learning.models import MODEL_REGISTRY, build_model, parameter_count


def test_clipping_rule_scales_with_sqrt_of_parameters():
    small, big = nn.Linear(9, 100), nn.Linear(39, 100)  # 1000 and 4000 parameters
    assert P_REF == 1000
    assert clipping_norm(small) == pytest.approx(1.0)
    assert clipping_norm(big) == pytest.approx(2.0)
    assert clipping_norm(big, c_ref=0.5, p_ref=4000) == pytest.approx(0.5)


def test_clipping_norms_of_registry_models():
    expected = {"mlp": 2.1932, "cnn": 1.3950, "transformer": 3.1000, "logreg": 0.8062}
    for name, value in expected.items():
        model = build_model(name, input_shape=(1, 8, 8), num_classes=10, seed=0)
        assert clipping_norm(model) == pytest.approx(value, abs=1e-4)
        assert clipping_norm(model) == pytest.approx(math.sqrt(parameter_count(model) / 1000))


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_per_layer_norms_total_equals_flat(name):
    model = build_model(name, input_shape=(1, 8, 8), num_classes=10, seed=0)
    norms = per_layer_clipping_norms(model, c_ref=1.5)
    assert len(norms) == len([p for p in model.parameters() if p.requires_grad])
    assert math.sqrt(sum(c * c for c in norms)) == pytest.approx(clipping_norm(model, c_ref=1.5))


def test_clipping_invalid():
    with pytest.raises(LearningParameterInvalid, match="c_ref"):
        clipping_norm(nn.Linear(2, 2), c_ref=0.0)
    with pytest.raises(LearningParameterInvalid, match="p_ref"):
        clipping_norm(nn.Linear(2, 2), p_ref=0)
