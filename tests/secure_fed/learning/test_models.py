import pytest
import torch
from torch import nn

from secure_fed.errors import LearningParameterInvalid, ModelUnsupported, UnknownModel
from secure_fed.learning.models import (
    MODEL_REGISTRY,
    build_model,
    check_private_compatible,
    parameter_count,
)

SHAPES = [(1, 8, 8), (30,), (1, 28, 28)]


def test_registry_has_the_four_architectures():
    assert set(MODEL_REGISTRY) == {"mlp", "cnn", "transformer", "logreg"}


def test_unknown_model_lists_registry():
    with pytest.raises(UnknownModel, match="registered models: cnn, logreg, mlp, transformer") as e:
        build_model("resnet", input_shape=(1, 8, 8), num_classes=10, seed=0)
    assert e.value.code == "LEARNING_UNKNOWN_MODEL"
    assert "resnet" in str(e.value)


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
@pytest.mark.parametrize("shape", SHAPES)
def test_every_model_builds_and_is_private_compatible(name, shape):
    model = build_model(name, input_shape=shape, num_classes=7, seed=3)
    check_private_compatible(model)
    out = model(torch.randn(5, *shape))
    assert out.shape == (5, 7)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def test_cnn_uses_groupnorm():
    model = build_model("cnn", input_shape=(1, 8, 8), num_classes=10, seed=0)
    assert sum(isinstance(m, nn.GroupNorm) for m in model.modules()) == 2


def test_build_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("transformer", input_shape=(1, 8, 8), num_classes=10, seed=5)
    after = torch.rand(1)
    b = build_model("transformer", input_shape=(1, 8, 8), num_classes=10, seed=5)
    c = build_model("transformer", input_shape=(1, 8, 8), num_classes=10, seed=6)
    assert torch.equal(before, after)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    pairs = zip(a.parameters(), c.parameters(), strict=True)
    assert any(not torch.equal(pa, pc) for pa, pc in pairs)


def test_parameter_counts_on_digits():
    counts = {
        n: parameter_count(build_model(n, input_shape=(1, 8, 8), num_classes=10, seed=0))
        for n in MODEL_REGISTRY
    }
    assert counts == {"mlp": 4810, "cnn": 1946, "transformer": 9610, "logreg": 650}


def test_parameter_count_ignores_frozen():
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    model[0].weight.requires_grad_(False)
    assert parameter_count(model) == 2 + 4 + 2


def test_batchnorm_refused_listing_layers():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten())
    with pytest.raises(ModelUnsupported, match=r"1 \(BatchNorm2d\)") as e:
        check_private_compatible(model)
    assert e.value.code == "LEARNING_MODEL_UNSUPPORTED"
    assert "0 (Conv2d)" not in str(e.value)


def test_several_offending_layers_are_all_listed():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.BatchNorm1d(4)
            self.rnn = nn.LSTM(4, 4)
            self.attn = nn.MultiheadAttention(4, 2)

    message = ""
    with pytest.raises(ModelUnsupported) as e:
        check_private_compatible(Net())
    message = str(e.value)
    assert "norm (BatchNorm1d)" in message
    assert "rnn (LSTM)" in message
    assert "attn (MultiheadAttention)" in message


def test_module_without_trainable_parameters_refused():
    with pytest.raises(ModelUnsupported, match="no trainable parameters"):
        check_private_compatible(nn.Sequential(nn.ReLU()))


@pytest.mark.parametrize(
    ("shape", "classes", "fragment"),
    [((8, 8), 10, "input_shape"), ((1, 0, 8), 10, "input_shape"), ((64,), 1, "num_classes")],
)
def test_invalid_shapes_refused(shape, classes, fragment):
    with pytest.raises(LearningParameterInvalid, match=fragment) as e:
        build_model("mlp", input_shape=shape, num_classes=classes, seed=0)
    assert e.value.code == "LEARNING_PARAMETER_INVALID"


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
@pytest.mark.parametrize("shape", [(16,), (1, 8, 8)])
def test_an_empty_batch_gives_empty_logits(name: str, shape: tuple[int, ...]) -> None:
    """DP-SGD's Poisson sampling can draw no row; every model must accept the empty batch."""
    model = build_model(name, input_shape=shape, num_classes=2, seed=0)
    out = model(torch.zeros((0, *shape)))
    assert tuple(out.shape) == (0, 2)
