"""DP-SGD as applied: what Opacus actually ran, compared with what the ledger charged.

The trainer's report repeats the plan, so these tests never read it. They read
the ``DPOptimizer`` Opacus built (through ``PrivateTrainer.on_private``) and the
event the ledger recorded, and they measure the noise and the clipping in the
parameter update itself:

* zero inputs to a bias-free linear model give per-example gradients that are
  exactly zero, so one DP-SGD step moves the weights by pure noise; its
  standard deviation must be ``sigma * C / B`` (``sigma`` and ``C`` from the
  ledger's event, ``B`` the batch) within a chi-square bound;
* identical inputs with a gradient norm about 10^4 times ``C`` must move the
  weights by exactly ``C`` per example along the gradient direction (plus noise).

With ``batch_size = N`` the Poisson sample rate is 1 (every row in the batch)
and one step per round with a fresh optimizer makes the update a single noisy
gradient. The mutant tests run the same checks against a trainer that hands
Opacus a noise multiplier of 0, or no clipping (``max_grad_norm = inf``), and
require them to fail: checks that cannot fail are a defect.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from scipy import stats
from torch import nn

from privacy_ledger import PrivacyLedger
from secure_fed.learning.data import load_task
from secure_fed.learning.models import build_model
from secure_fed.learning.private_training import DPGoal, PrivateTrainer

N, FEATURES, CLASSES = 20, 100, 10  # P = 1000 weights, so C_k = C_ref = 1
ROUNDS, LR = 3, 0.1
P_TAIL = 1e-6  # two-sided tail of each statistical bound


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[PrivacyLedger]:
    """A real SQLite privacy ledger with one participant and asset."""
    led = PrivacyLedger.from_url(f"sqlite:///{(tmp_path / 'ledger.db').as_posix()}")
    led.register_participant("p", institution="Hospital", kind="hospital")
    led.register_asset("p", "a")
    led.set_budget("p", "a", epsilon="20", delta=1e-5)
    yield led


def _linear() -> nn.Module:
    return nn.Linear(FEATURES, CLASSES, bias=False)


def _trainer(
    model: nn.Module, x: np.ndarray, y: np.ndarray, ledger: PrivacyLedger, **kw: Any
) -> PrivateTrainer:
    args: dict[str, Any] = {
        "batch_size": len(x),  # sample rate 1: every row in every batch
        "epochs_per_round": None,
        "steps_per_round": 1,
        "goal": DPGoal(epsilon=6.0, delta=1e-5, rounds=ROUNDS),
        "lr": LR,
    }
    return PrivateTrainer(
        model=model,
        x=x,
        y=y,
        budget=ledger,
        participant_id="p",
        asset_id="a",
        **{**args, **kw},
    )


def _observed_rounds(
    trainer: PrivateTrainer, rounds: int, *, reset: bool = False
) -> list[dict[str, Any]]:
    """Train ``rounds`` rounds; per round the optimizer seen and the weight update.

    ``reset`` zeroes the weights before every round (same gradient each round).
    """
    seen: list[dict[str, Any]] = []

    def observe(module: nn.Module, optimizer: Any, loader: Any) -> None:
        seen.append({"optimizer": optimizer, "loader": loader})

    trainer.on_private = observe
    for r in range(rounds):
        if reset:
            with torch.no_grad():
                for p in trainer.model.parameters():
                    p.zero_()
        before = [p.detach().clone() for p in trainer.model.parameters()]
        assert trainer.train_round(f"r{r}").trained
        after = list(trainer.model.parameters())
        diffs = [(a.detach() - b).flatten() for a, b in zip(after, before, strict=True)]
        seen[-1]["update"] = torch.cat(diffs)
    return seen


def _committed(ledger: PrivacyLedger) -> list[Any]:
    events = ledger.events("p", "a", states=("committed",))
    assert len(events) > 0
    return [e.event for e in events]


def check_plan_applied(ledger: PrivacyLedger, seen: list[dict[str, Any]]) -> None:
    """The optimizer Opacus built uses exactly the ledger's recorded mechanism."""
    events = _committed(ledger)
    assert len(events) == len(seen)
    for event, run in zip(events, seen, strict=True):
        opt, loader = run["optimizer"], run["loader"]
        assert opt.noise_multiplier == event.noise_multiplier
        # per_layer: Opacus sums the layer norms in float32 (relative error ~1e-8)
        assert opt.max_grad_norm == pytest.approx(event.max_grad_norm, rel=1e-6)
        assert loader.sample_rate == event.sample_rate
        assert opt.secure_mode is False and event.versions["secure_rng"] == "false"


def check_noise(ledger: PrivacyLedger, seen: list[dict[str, Any]]) -> None:
    """Zero gradients: the observed gradient is the noise, std ``sigma * C / B``."""
    chi2 = 0.0
    dof = 0
    for event, run in zip(_committed(ledger), seen, strict=True):
        lr = run["optimizer"].param_groups[0]["lr"]
        noise = -run["update"].detach().double().numpy() / lr  # the gradient of one SGD step
        std = event.noise_multiplier * event.max_grad_norm / N
        chi2 += float(np.sum((noise / std) ** 2))
        dof += noise.size
        assert abs(noise.mean()) <= 6 * std / math.sqrt(noise.size)
    low, high = stats.chi2.ppf(P_TAIL / 2, dof), stats.chi2.isf(P_TAIL / 2, dof)
    assert low <= chi2 <= high, (chi2 / dof, low / dof, high / dof)


def check_clipping(ledger: PrivacyLedger, seen: list[dict[str, Any]], u: torch.Tensor) -> None:
    """Huge identical gradients: each example contributes exactly ``C`` along ``u``."""
    for event, run in zip(_committed(ledger), seen, strict=True):
        lr = run["optimizer"].param_groups[0]["lr"]
        grad = -run["update"].detach().double() / lr
        c, std = event.max_grad_norm, event.noise_multiplier * event.max_grad_norm / N
        along = float(grad @ u)
        assert abs(along - c) <= 6 * std, (along, c, std)  # mean of N clipped copies of C*u
        rest = grad - along * u
        dof = rest.numel() - 1
        chi2 = float(rest @ rest) / std**2
        assert stats.chi2.ppf(P_TAIL / 2, dof) <= chi2 <= stats.chi2.isf(P_TAIL / 2, dof)


def _zero_gradient_run(ledger: PrivacyLedger, **kw: Any) -> list[dict[str, Any]]:
    x = np.zeros((N, FEATURES), dtype=np.float32)
    y = np.arange(N) % CLASSES
    trainer = _trainer(_linear(), x, y, ledger, **kw)
    return _observed_rounds(trainer, ROUNDS)


def _huge_gradient_run(ledger: PrivacyLedger) -> tuple[list[dict[str, Any]], torch.Tensor]:
    x = np.full((N, FEATURES), 1000.0, dtype=np.float32)
    y = np.zeros(N, dtype=np.int64)
    model = _linear()  # zeroed before every round
    # Per-example gradient of cross-entropy at zero weights: (softmax(0) - e_0) x^T.
    g = torch.outer(
        torch.full((CLASSES,), 1 / CLASSES) - torch.eye(CLASSES)[0], torch.ones(FEATURES)
    )
    u = (g / g.norm()).flatten().double()
    return _observed_rounds(_trainer(model, x, y, ledger), ROUNDS, reset=True), u


@pytest.mark.parametrize("clipping", ["flat", "per_layer"])
def test_optimizer_applies_the_recorded_plan(ledger: PrivacyLedger, clipping: str) -> None:
    task = load_task("digits", seed=0)
    model = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=0)
    trainer = _trainer(
        model,
        task.private_x[:200],
        task.private_y[:200],
        ledger,
        batch_size=25,
        clipping=clipping,
    )
    seen = _observed_rounds(trainer, 2)
    check_plan_applied(ledger, seen)
    if clipping == "per_layer":  # the per-layer norms Opacus clips at add up to C_k
        norms = seen[0]["optimizer"].max_grad_norms
        assert len(norms) == 4 and math.hypot(*norms) == pytest.approx(trainer.max_grad_norm)


def test_gradient_noise_is_sigma_c_over_b(ledger: PrivacyLedger) -> None:
    seen = _zero_gradient_run(ledger)
    check_plan_applied(ledger, seen)
    check_noise(ledger, seen)


def test_each_example_contributes_at_most_c(ledger: PrivacyLedger) -> None:
    seen, u = _huge_gradient_run(ledger)
    check_clipping(ledger, seen, u)


# -- the checks kill the two mutants -------------------------------------------------


def _mutate_make_private(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[dict[str, Any]], None]
) -> None:
    """Make the trainer hand Opacus other arguments than the ones it reserved."""
    original = PrivacyEngine.make_private

    def mutated(self: Any, **kwargs: Any) -> Any:
        change(kwargs)
        return original(self, **kwargs)

    monkeypatch.setattr(PrivacyEngine, "make_private", mutated)


def _no_noise(kwargs: dict[str, Any]) -> None:
    kwargs["noise_multiplier"] = 0.0


def _no_clipping(kwargs: dict[str, Any]) -> None:
    kwargs["max_grad_norm"] = math.inf


@pytest.mark.parametrize("change", [_no_noise, _no_clipping], ids=["sigma0", "no_clip"])
def test_mutants_are_detected(
    ledger: PrivacyLedger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[dict[str, Any]], None],
) -> None:
    _mutate_make_private(monkeypatch, change)
    seen = _zero_gradient_run(ledger)
    with pytest.raises(AssertionError):
        check_plan_applied(ledger, seen)
    with pytest.raises(AssertionError):
        check_noise(ledger, seen)
    other = PrivacyLedger.from_url(f"sqlite:///{(tmp_path / 'other.db').as_posix()}")
    other.register_participant("p", institution="Hospital", kind="hospital")
    other.register_asset("p", "a")
    other.set_budget("p", "a", epsilon="20", delta=1e-5)
    seen_huge, u = _huge_gradient_run(other)
    with pytest.raises(AssertionError):
        check_clipping(other, seen_huge, u)
