import math

import numpy as np
import pytest
import torch
from opacus.grad_sample import GradSampleModule
from torch import nn

from secure_fed.errors import LearningParameterInvalid
from secure_fed.learning.data import load_task
from secure_fed.learning.distill import (
    PUBLIC_LOGIT_BOUND,
    distill,
    distill_weight,
    kl_to_targets,
    predict_public,
    soft_labels_from_aggregate,
    temperature_schedule,
)
from secure_fed.learning.models import MODEL_REGISTRY, build_model


@pytest.fixture(scope="module")
def task():
    return load_task("digits", seed=0)


class _Fixed(nn.Module):
    """Returns preset logits, whatever the input (to test the bound exactly)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor(logits, dtype=torch.float32)
        self.lin = nn.Linear(1, 1)

    def forward(self, x):
        return self.logits[: len(x)]


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_predictions_are_centered_and_bounded(name, task):
    model = build_model(name, input_shape=task.input_shape, num_classes=10, seed=0)
    model.train()
    out = predict_public(model, task.public_x)
    assert out.dtype == np.float32 and out.shape == (len(task.public_x), 10)
    assert np.abs(out).max() <= PUBLIC_LOGIT_BOUND
    assert np.allclose(out.sum(axis=1), 0, atol=1e-4)
    assert model.training  # mode restored


def test_large_logits_are_scaled_keeping_ranking():
    raw = [[100.0, 0.0, -20.0], [1.0, 2.0, 3.0]]
    out = predict_public(_Fixed(raw), np.zeros((2, 1), np.float32))
    assert np.abs(out).max() == pytest.approx(PUBLIC_LOGIT_BOUND)
    assert out[0].argsort().tolist() == [2, 1, 0]
    centered = np.array(raw[0]) - np.mean(raw[0])
    assert out[0] == pytest.approx(centered * 8.0 / np.abs(centered).max(), abs=1e-5)
    assert out[1] == pytest.approx([-1.0, 0.0, 1.0])  # within the bound: only centered


def test_predict_public_rejects_bad_input():
    with pytest.raises(LearningParameterInvalid, match="at least one row"):
        predict_public(nn.Linear(2, 2), np.zeros((0, 2), np.float32))
    with pytest.raises(LearningParameterInvalid, match="non-finite"):
        predict_public(_Fixed([[float("nan"), 0.0]]), np.zeros((1, 1), np.float32))


def test_soft_labels():
    avg = np.array([[2.0, 0.0, -2.0], [0.0, 0.0, 0.0]])
    soft = soft_labels_from_aggregate(avg, temperature=2.0)
    assert soft.dtype == np.float32 and np.allclose(soft.sum(axis=1), 1)
    expected = np.exp([1.0, 0.0, -1.0]) / np.exp([1.0, 0.0, -1.0]).sum()
    assert soft[0] == pytest.approx(expected, rel=1e-5)
    assert soft[1] == pytest.approx([1 / 3] * 3)
    hot = soft_labels_from_aggregate(avg, temperature=0.5)
    assert hot[0, 0] > soft[0, 0]
    with pytest.raises(LearningParameterInvalid, match="temperature"):
        soft_labels_from_aggregate(avg, temperature=0.0)
    with pytest.raises(LearningParameterInvalid, match="finite"):
        soft_labels_from_aggregate(np.zeros(3), temperature=1.0)


def test_temperature_schedule_is_cosine():
    temps = [temperature_schedule(r, 5) for r in range(5)]
    assert temps[0] == 4.0 and temps[-1] == 1.0
    assert temps[2] == pytest.approx(2.5)
    assert temps[1] == pytest.approx(1 + 3 * (1 + math.cos(math.pi / 4)) / 2)
    assert all(a > b for a, b in zip(temps, temps[1:], strict=False))
    assert temperature_schedule(0, 1) == 4.0
    assert temperature_schedule(3, 4, t_max=10, t_min=2) == 2.0
    for args, kw, fragment in [
        ((5, 5), {}, "round_index"),
        ((0, 0), {}, "round_index"),
        ((0, 3), {"t_max": 1.0, "t_min": 2.0}, "t_max must be >= t_min"),
        ((0, 3), {"t_min": 0.0}, "t_min"),
    ]:
        with pytest.raises(LearningParameterInvalid, match=fragment):
            temperature_schedule(*args, **kw)


def test_distill_weight_decays_like_inverse_sqrt():
    assert distill_weight(0) == 1.0
    assert distill_weight(3) == pytest.approx(0.5)
    assert distill_weight(8, lambda0=3.0) == pytest.approx(1.0)
    with pytest.raises(LearningParameterInvalid, match="round_index"):
        distill_weight(-1)
    with pytest.raises(LearningParameterInvalid, match="lambda0"):
        distill_weight(0, lambda0=-1.0)


def _teacher_targets(task, temperature):
    teacher = build_model("cnn", input_shape=task.input_shape, num_classes=10, seed=7)
    with torch.no_grad():  # make the teacher opinionated: scale its head
        for p in teacher.parameters():
            p.mul_(3.0)
    avg = predict_public(teacher, task.public_x)
    return soft_labels_from_aggregate(avg, temperature=temperature)


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_distillation_reduces_kl(name, task):
    temperature = 2.0
    targets = _teacher_targets(task, temperature)
    student = build_model(name, input_shape=task.input_shape, num_classes=10, seed=0)
    before = kl_to_targets(student, task.public_x, targets, temperature=temperature)
    final = distill(
        student,
        task.public_x,
        targets,
        temperature=temperature,
        weight=1.0,
        epochs=5,
        lr=0.1,
        batch_size=64,
        seed=0,
    )
    after = kl_to_targets(student, task.public_x, targets, temperature=temperature)
    assert final == pytest.approx(after, rel=1e-5)
    assert after < 0.5 * before


def test_distillation_through_an_opacus_wrapper(task):
    targets = _teacher_targets(task, 1.0)
    student = build_model("logreg", input_shape=task.input_shape, num_classes=10, seed=0)
    wrapped = GradSampleModule(student)
    before = kl_to_targets(student, task.public_x, targets, temperature=1.0)
    after = distill(
        wrapped,
        task.public_x,
        targets,
        temperature=1.0,
        weight=0.5,
        epochs=3,
        lr=0.1,
        batch_size=64,
        seed=0,
    )
    assert after < 0.5 * before
    assert not any(hasattr(p, "grad_sample") for p in student.parameters())
    wrapped._close()


def test_zero_weight_trains_nothing(task):
    targets = _teacher_targets(task, 1.0)
    student = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=0)
    before = [p.detach().clone() for p in student.parameters()]
    assert (
        distill(
            student,
            task.public_x,
            targets,
            temperature=1.0,
            weight=0.0,
            epochs=1,
            lr=0.1,
            batch_size=64,
            seed=0,
        )
        == 0.0
    )
    assert all(torch.equal(a, b) for a, b in zip(before, student.parameters(), strict=True))


@pytest.mark.parametrize(
    ("targets", "kwargs", "fragment"),
    [
        (np.full((5, 10), 0.1), {}, "N_pub"),
        (None, {"weight": -1.0}, "weight"),
        (None, {"epochs": 0}, "epochs"),
        ("neg", {}, "probability vectors"),
        (np.full((359, 3), 1 / 3), {}, "predicts 10 classes but soft_targets have 3"),
    ],
)
def test_distill_validation(task, targets, kwargs, fragment):
    student = build_model("logreg", input_shape=task.input_shape, num_classes=10, seed=0)
    n = len(task.public_x)
    if targets is None:
        targets = np.full((n, 10), 0.1)
    elif isinstance(targets, str):
        targets = np.full((n, 10), 0.1)
        targets[0, 0], targets[0, 1] = -0.1, 0.3
    args = {
        "temperature": 1.0,
        "weight": 1.0,
        "epochs": 1,
        "lr": 0.1,
        "batch_size": 32,
        "seed": 0,
        **kwargs,
    }
    with pytest.raises(LearningParameterInvalid, match=fragment):
        distill(student, task.public_x, targets, **args)
