"""Logit adjustment: the loss, the noisy prior and its charge, the distillation prior.

Known answers first (the adjusted cross-entropy, the floored prior, the teacher's
class mass behind tempered soft labels), then the trainer: the prior is one
Gaussian event charged before the first DP-SGD round and accounted by the
calibration, and DP-SGD with the adjusted loss still clips every example at
``C`` and adds noise ``sigma * C / B`` (measured in the update, with the two
mutants of ``test_dp_applied`` required to fail the same checks).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from scipy import stats
from torch import nn

from secure_fed.errors import LearningParameterInvalid
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.distill import distill, soft_labels_from_aggregate, target_log_prior
from secure_fed.learning.logit_adjustment import (
    LogitAdjustment,
    adjusted_cross_entropy,
    class_counts,
    log_prior,
)
from secure_fed.learning.private_training import DPGoal, PrivateTrainer, predict_logits

N, FEATURES, CLASSES = 20, 100, 10  # P = 1000 weights, so C_k = C_ref = 1
P_TAIL = 1e-6


# -- known answers ----------------------------------------------------------------------


def test_adjusted_cross_entropy_known_answer() -> None:
    logits = torch.zeros(1, 2)
    offset = torch.log(torch.tensor([0.75, 0.25]))
    loss = adjusted_cross_entropy(logits, torch.tensor([1]), offset)
    assert float(loss) == pytest.approx(-math.log(0.25))
    plain = adjusted_cross_entropy(logits, torch.tensor([1]), None)
    assert float(plain) == pytest.approx(math.log(2))


def test_minimiser_of_adjusted_loss_is_the_balanced_score() -> None:
    """Prior (0.9, 0.1), uninformative rows: the adjusted loss is stationary at equal logits.

    Plain cross-entropy is stationary at the log prior ratio ``log 9`` instead.
    """
    y = torch.tensor([0] * 9 + [1])
    offset = torch.log(torch.tensor([0.9, 0.1]))
    for adjust, gap in ((offset, 0.0), (None, math.log(9))):
        bias = torch.tensor([gap, 0.0], requires_grad=True)
        torch.autograd.backward(adjusted_cross_entropy(bias.expand(10, 2), y, adjust))
        assert bias.grad is not None
        assert torch.allclose(bias.grad, torch.zeros(2), atol=1e-6)
        moved = torch.tensor([gap + 0.5, 0.0], requires_grad=True)
        torch.autograd.backward(adjusted_cross_entropy(moved.expand(10, 2), y, adjust))
        assert moved.grad is not None and float(moved.grad[0]) > 0.02


def test_log_prior_floors_and_normalises() -> None:
    got = log_prior(np.array([3.0, -2.0, 1.0]), min_count=1.0)
    assert torch.allclose(got, torch.log(torch.tensor([0.6, 0.2, 0.2])))
    assert float(torch.exp(got).sum()) == pytest.approx(1.0)


def test_class_counts_keep_missing_classes() -> None:
    assert class_counts(np.array([0, 0, 2]), 4).tolist() == [2.0, 0.0, 1.0, 0.0]
    with pytest.raises(LearningParameterInvalid, match="labels"):
        class_counts(np.array([0, 4]), 4)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tau": -1.0}, "tau"),
        ({"prior_noise_multiplier": 0.0}, "prior_noise_multiplier"),
        ({"min_count": math.nan}, "min_count"),
    ],
)
def test_settings_are_validated(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(LearningParameterInvalid, match=name):
        LogitAdjustment(**kwargs)


def test_prior_event_is_one_gaussian_release_of_sensitivity_one() -> None:
    event = LogitAdjustment(prior_noise_multiplier=4.0).event(delta=1e-5, versions={})
    assert (event.mechanism, event.sample_rate, event.steps) == ("gaussian", 1.0, 1)
    assert (event.noise_multiplier, event.max_grad_norm) == (4.0, 1.0)


def test_noisy_prior_has_the_noise_it_claims() -> None:
    """Counts 1e5 apart from noise: the prior is exact to ~1e-4; the noise std is sigma."""
    y = np.array([0] * 25_000 + [1] * 75_000)
    adjustment = LogitAdjustment(prior_noise_multiplier=4.0)
    offset = adjustment.noisy_log_prior(y, 2, torch.Generator().manual_seed(1))
    assert torch.allclose(torch.exp(offset), torch.tensor([0.25, 0.75]), atol=2e-4)
    draws = [
        float(torch.exp(adjustment.noisy_log_prior(y, 2, torch.Generator().manual_seed(s)))[0])
        * (100_000 + 0.0)
        for s in range(400)
    ]
    # the first count's noise, through the normalisation (which moves it by < 0.1 %)
    assert np.std(draws) == pytest.approx(4.0 * 0.75, rel=0.2)


def test_target_log_prior_recovers_the_teachers_class_mass() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(50, 3)) + np.array([2.0, 0.0, -1.0])
    teacher = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    for t in (0.5, 1.0, 4.0):
        soft = soft_labels_from_aggregate(z.astype(np.float32), temperature=t)
        got = torch.exp(target_log_prior(soft, temperature=t)).numpy()
        np.testing.assert_allclose(got, teacher.mean(axis=0), rtol=1e-3)


def test_adjusted_distillation_learns_the_balanced_score() -> None:
    """Teacher probabilities 0.9 / 0.1 on every row: the adjusted student ends balanced."""
    public = np.ones((64, 1), dtype=np.float32)
    soft = np.tile(np.array([[0.9, 0.1]], dtype=np.float32), (64, 1))
    gaps = {}
    for tau in (0.0, 1.0):
        student = nn.Linear(1, 2)
        nn.init.zeros_(student.weight)
        nn.init.zeros_(student.bias)
        distill(
            student, public, soft, temperature=1.0, weight=1.0, epochs=100, lr=1.0,
            batch_size=64, seed=0, logit_adjustment=tau,
        )  # fmt: skip
        logits = predict_logits(student, public[:1])[0]
        gaps[tau] = float(logits[0] - logits[1])
    assert gaps[0.0] == pytest.approx(math.log(9), abs=0.05)
    assert gaps[1.0] == pytest.approx(0.0, abs=0.05)


def test_distillation_refuses_a_negative_adjustment() -> None:
    with pytest.raises(LearningParameterInvalid, match="logit_adjustment"):
        distill(
            nn.Linear(1, 2), np.ones((4, 1), dtype=np.float32),
            np.full((4, 2), 0.5, dtype=np.float32), temperature=1.0, weight=1.0, epochs=1,
            lr=0.1, batch_size=4, seed=0, logit_adjustment=-1.0,
        )  # fmt: skip


# -- the trainer: charged, accounted, still clipped and noised ------------------------


def _trainer(x: np.ndarray, y: np.ndarray, gate: InMemoryBudgetGate, **kw: Any) -> PrivateTrainer:
    args: dict[str, Any] = {
        "batch_size": len(x),
        "epochs_per_round": None,
        "steps_per_round": 1,
        "goal": DPGoal(epsilon=6.0, delta=1e-5, rounds=3),
        "lr": 0.1,
        "logit_adjustment": LogitAdjustment(),
    }
    return PrivateTrainer(
        model=nn.Linear(FEATURES, CLASSES, bias=False),
        x=x,
        y=y,
        budget=gate,
        participant_id="p",
        asset_id="a",
        **{**args, **kw},
    )


def _sgd_events(gate: InMemoryBudgetGate) -> list[Any]:
    return [
        r.event
        for r in gate.events("p", "a", states=("committed",))
        if r.event.mechanism == "subsampled_gaussian"
    ]


def test_prior_is_charged_once_before_the_first_round_and_accounted() -> None:
    gate = InMemoryBudgetGate(epsilon=20, delta=1e-5)
    x = np.random.default_rng(0).normal(size=(N, FEATURES)).astype(np.float32)
    trainer = _trainer(x, np.arange(N) % CLASSES, gate)
    for r in range(3):
        assert trainer.train_round(f"r{r + 1}").trained
    rows = gate.events("p", "a", states=("committed",))
    assert [r.round_id for r in rows] == ["r1-label-prior", "r1", "r2", "r3"]
    assert rows[0].event.mechanism == "gaussian"
    assert trainer.logit_offset is not None and trainer.logit_offset.shape == (CLASSES,)
    spent = float(gate.epsilon_spent("p", "a"))
    assert 5.9 < spent <= 6.0  # the goal covers the prior and the three rounds
    plain_gate = InMemoryBudgetGate(epsilon=20, delta=1e-5)
    plain = _trainer(x, np.arange(N) % CLASSES, plain_gate, logit_adjustment=None)
    plain.train_round("r1")
    assert _sgd_events(gate)[0].noise_multiplier > _sgd_events(plain_gate)[0].noise_multiplier


def test_refused_prior_trains_nothing() -> None:
    gate = InMemoryBudgetGate(epsilon=0.01, delta=1e-5)
    trainer = _trainer(np.zeros((N, FEATURES), dtype=np.float32), np.arange(N) % CLASSES, gate)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    report = trainer.train_round("r1")
    assert not report.trained and "refused" in (report.refused_reason or "")
    assert gate.events("p", "a", states=("committed",)) == []
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


def _updates(trainer: PrivateTrainer, *, rounds: int = 3) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    trainer.on_private = lambda module, opt, loader: seen.append({"optimizer": opt})
    for r in range(rounds):
        with torch.no_grad():
            for p in trainer.model.parameters():
                p.zero_()
        before = [p.detach().clone() for p in trainer.model.parameters()]
        assert trainer.train_round(f"r{r + 1}").trained
        after = trainer.model.parameters()
        seen[-1]["grad"] = -torch.cat(
            [(a.detach() - b).flatten() for a, b in zip(after, before, strict=True)]
        ).double() / float(seen[-1]["optimizer"].param_groups[0]["lr"])
    return seen


def _check_noise(gate: InMemoryBudgetGate, seen: list[dict[str, Any]]) -> None:
    """Zero inputs: the step's gradient is pure noise of std ``sigma * C / N``."""
    chi2, dof = 0.0, 0
    for event, run in zip(_sgd_events(gate), seen, strict=True):
        assert run["optimizer"].noise_multiplier == event.noise_multiplier
        std = event.noise_multiplier * event.max_grad_norm / N
        chi2 += float((run["grad"] / std).square().sum())
        dof += run["grad"].numel()
    assert stats.chi2.ppf(P_TAIL / 2, dof) <= chi2 <= stats.chi2.isf(P_TAIL / 2, dof)


def _check_clipping(gate: InMemoryBudgetGate, seen: list[dict[str, Any]], u: torch.Tensor) -> None:
    """Huge identical gradients: the mean step is exactly ``C`` along ``u``, plus noise."""
    for event, run in zip(_sgd_events(gate), seen, strict=True):
        c, std = event.max_grad_norm, event.noise_multiplier * event.max_grad_norm / N
        along = float(run["grad"] @ u)
        assert abs(along - c) <= 6 * std, (along, c, std)


def _huge_gradient(trainer: PrivateTrainer) -> torch.Tensor:
    """Direction of every example's gradient at zero weights under the adjusted loss."""
    assert trainer.logit_offset is not None
    p = torch.softmax(trainer.logit_offset.double(), dim=0)
    g = torch.outer(p - torch.eye(CLASSES, dtype=torch.float64)[0], torch.ones(FEATURES))
    u: torch.Tensor = (g / g.norm()).flatten()
    return u


def _zero_input_trainer(gate: InMemoryBudgetGate) -> PrivateTrainer:
    return _trainer(np.zeros((N, FEATURES), np.float32), np.arange(N) % CLASSES, gate)


def _huge_input_trainer(gate: InMemoryBudgetGate) -> PrivateTrainer:
    x = np.full((N, FEATURES), 1000.0, dtype=np.float32)
    y = np.array([0] * (N - 2) + [1, 2])  # a skewed prior: a large adjustment
    return _trainer(x, y, gate)


def test_adjusted_dp_sgd_still_noises_and_clips() -> None:
    gate = InMemoryBudgetGate(epsilon=20, delta=1e-5)
    _check_noise(gate, _updates(_zero_input_trainer(gate)))
    gate = InMemoryBudgetGate(epsilon=20, delta=1e-5)
    trainer = _huge_input_trainer(gate)
    _check_clipping(gate, _updates(trainer), _huge_gradient(trainer))


@pytest.mark.parametrize("mutant", ["sigma0", "no_clip"])
def test_adjusted_mutants_are_detected(monkeypatch: pytest.MonkeyPatch, mutant: str) -> None:
    """A trainer that hands Opacus no noise, or no clipping, fails the matching check."""
    original = PrivacyEngine.make_private

    def mutated(self: Any, **kwargs: Any) -> Any:
        kwargs.update(noise_multiplier=0.0) if mutant == "sigma0" else kwargs.update(
            max_grad_norm=math.inf
        )
        return original(self, **kwargs)

    monkeypatch.setattr(PrivacyEngine, "make_private", mutated)
    gate = InMemoryBudgetGate(epsilon=20, delta=1e-5)
    if mutant == "sigma0":
        seen = _updates(_zero_input_trainer(gate))
        with pytest.raises(AssertionError):
            _check_noise(gate, seen)
        return
    trainer = _huge_input_trainer(gate)
    seen = _updates(trainer)
    with pytest.raises(AssertionError):
        _check_clipping(gate, seen, _huge_gradient(trainer))
