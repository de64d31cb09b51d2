import numpy as np
import pytest
import torch
from torch import nn

from privacy_ledger import PrivacyLedger
from privacy_ledger.errors import ReservationExpired
from secure_fed.errors import (
    LearningParameterInvalid,
    ModelUnsupported,
    PrivateTrainingFailed,
)
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.clipping import clipping_norm
from secure_fed.learning.data import dirichlet_split, load_task
from secure_fed.learning.models import MODEL_REGISTRY, build_model
from secure_fed.learning.private_training import (
    DPGoal,
    PrivateTrainer,
    evaluate,
    train_nonprivate,
)

GOAL = DPGoal(epsilon=8.0, delta=1e-5, rounds=3)


@pytest.fixture(scope="module")
def task():
    return load_task("digits", seed=0)


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


def _held(gate):
    return gate.events("p1", "digits", states=("reserved",))


def _same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _trainer(model, task, gate, **kw):
    args = {
        "model": model,
        "x": task.private_x[:200],
        "y": task.private_y[:200],
        "goal": GOAL,
        "budget": gate,
        "participant_id": "p1",
        "asset_id": "digits",
        "batch_size": 25,
        "lr": 0.1,
        "epochs_per_round": None,
        "steps_per_round": 2,
        "seed": 0,
    }
    return PrivateTrainer(**{**args, **kw})


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"epsilon": 0.0, "delta": 1e-5, "rounds": 1}, "epsilon"),
        ({"epsilon": 1.0, "delta": 0.0, "rounds": 1}, "delta"),
        ({"epsilon": 1.0, "delta": 1e-5, "rounds": 0}, "rounds"),
    ],
)
def test_goal_validation(kwargs, fragment):
    with pytest.raises(LearningParameterInvalid, match=fragment):
        DPGoal(**kwargs)


# --- private training --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODEL_REGISTRY))
def test_every_model_trains_one_dp_step(name, task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = build_model(name, input_shape=task.input_shape, num_classes=10, seed=1)
    before = _weights(model)
    report = _trainer(model, task, gate, steps_per_round=1).train_round("r1")
    assert report.trained and report.refused_reason is None and report.steps == 1
    assert report.max_grad_norm == pytest.approx(clipping_norm(model))
    assert report.sample_rate == pytest.approx(1 / 8)
    assert report.noise_multiplier > 0 and not report.secure_rng
    assert 0 < report.epsilon_spent <= 8.0
    assert not _same(before, _weights(model))
    assert type(model).__name__ != "GradSampleModule"
    assert not any(hasattr(p, "grad_sample") for p in model.parameters())  # hooks removed


def test_per_layer_clipping_trains(task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = build_model("cnn", input_shape=task.input_shape, num_classes=10, seed=1)
    report = _trainer(model, task, gate, clipping="per_layer").train_round("r1")
    assert report.trained


def test_batchnorm_model_refused_before_training(task):
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 10))
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    with pytest.raises(ModelUnsupported, match=r"1 \(BatchNorm2d\)"):
        _trainer(model, task, gate)
    assert gate.epsilon_spent("p1", "digits") == 0.0


def test_refused_reservation_trains_and_spends_nothing(task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    gate.set_budget("p1", "digits", epsilon=0.05)  # the goal asks for more than the ledger gives
    model = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=1)
    before = _weights(model)
    trainer = _trainer(model, task, gate, steps_per_round=400)
    report = trainer.train_round("r1")
    # the ledger's calibration, shared by the in-memory gate, finds no noise that fits
    assert not report.trained and "LEDGER_CALIBRATION_IMPOSSIBLE" in report.refused_reason
    assert report.steps == 0 and report.epsilon_spent == 0.0
    assert _same(before, _weights(model))


def test_goal_rounds_exhausted(task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = build_model("logreg", input_shape=task.input_shape, num_classes=10, seed=1)
    trainer = _trainer(model, task, gate, goal=DPGoal(epsilon=8.0, delta=1e-5, rounds=2))
    spent = [trainer.train_round(f"r{i}").epsilon_spent for i in range(2)]
    assert 0 < spent[0] < spent[1] <= 8.0
    before = _weights(model)
    report = trainer.train_round("r3")
    assert not report.trained and "round(s) are done" in report.refused_reason
    assert _same(before, _weights(model)) and report.epsilon_spent == spent[1]


class _Exploding(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 10)
        self.explode = False

    def forward(self, x):
        if self.explode:
            raise RuntimeError("device lost")
        return self.lin(x.reshape(len(x), -1))


def test_failure_after_reserve_aborts(task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = _Exploding()
    trainer = _trainer(model, task, gate)
    model.explode = True
    with pytest.raises(RuntimeError, match="device lost"):
        trainer.train_round("r1")
    assert gate.epsilon_spent("p1", "digits") == 0.0
    assert not _held(gate)  # the reservation was released
    model.explode = False
    assert trainer.train_round("r2").trained


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"lr": -1.0}, "lr"),
        ({"steps_per_round": None}, "exactly one"),
        ({"epochs_per_round": 1}, "exactly one"),
        ({"clipping": "adaptive"}, "clipping must be one of flat, per_layer"),
        ({"participant_id": ""}, "participant_id"),
        ({"y": np.zeros(3, dtype=np.int64)}, "equal length"),
    ],
)
def test_trainer_validation(kwargs, fragment, task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = build_model("logreg", input_shape=task.input_shape, num_classes=10, seed=1)
    with pytest.raises(LearningParameterInvalid, match=fragment):
        _trainer(model, task, gate, **kwargs)


def test_private_training_with_the_real_ledger(task, tmp_path):
    ledger = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.register_participant("p1", institution="Hospital One", kind="hospital")
    ledger.register_asset("p1", "digits")
    ledger.set_budget("p1", "digits", epsilon="8", delta=1e-5)
    model = build_model("logreg", input_shape=task.input_shape, num_classes=10, seed=1)
    trainer = _trainer(model, task, ledger, goal=DPGoal(epsilon=4.0, delta=1e-5, rounds=2))
    first = trainer.train_round("r1")
    second = trainer.train_round("r2")
    assert first.trained and second.trained
    assert 0 < first.epsilon_spent < second.epsilon_spent <= 4.0
    assert float(ledger.epsilon_spent("p1", "digits")) == pytest.approx(second.epsilon_spent)
    stored = ledger.events("p1", "digits", states=("committed",))
    assert [e.round_id for e in stored] == ["r1", "r2"]
    assert stored[0].event.versions["secure_rng"] == "false"
    assert stored[0].event.max_grad_norm == pytest.approx(clipping_norm(model))
    assert stored[0].event.sample_rate == pytest.approx(1 / 8) and stored[0].event.steps == 2
    # once the ledger's budget is used up, another trainer is refused and spends nothing
    ledger.set_budget("p1", "digits", epsilon=ledger.epsilon_spent("p1", "digits"), delta=1e-5)
    other = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=2)
    before = _weights(other)
    greedy = _trainer(other, task, ledger, goal=DPGoal(epsilon=100.0, delta=1e-5, rounds=5))
    report = greedy.train_round("r3")
    assert not report.trained and "LEDGER_" in report.refused_reason
    assert _same(before, _weights(other))
    assert float(ledger.epsilon_spent("p1", "digits")) == pytest.approx(second.epsilon_spent)
    # a suspended participant is refused too
    ledger.set_budget("p1", "digits", epsilon="8", delta=1e-5)
    ledger.set_participant_status("p1", "suspended")
    report = _trainer(other, task, ledger).train_round("r4")
    assert not report.trained and "LEDGER_PARTICIPANT_SUSPENDED" in report.refused_reason
    assert _same(before, _weights(other))


def test_hopeless_noise_is_refused(task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    gate.set_budget("p1", "digits", epsilon=0.2)
    model = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=1)
    before = _weights(model)
    report = _trainer(model, task, gate, steps_per_round=100).train_round("r1")
    assert not report.trained and "max_noise_multiplier 20" in report.refused_reason
    assert _same(before, _weights(model)) and report.epsilon_spent == 0.0


def test_learning_happens_under_dp(task):
    """Five DP rounds (epsilon 8) on all private digits clearly beat chance (10 %)."""
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=0)
    trainer = PrivateTrainer(
        model=model,
        x=task.private_x,
        y=task.private_y,
        goal=DPGoal(epsilon=8.0, delta=1e-5, rounds=5),
        budget=gate,
        participant_id="p",
        asset_id="digits",
        batch_size=64,
        lr=0.1,
        epochs_per_round=2,
        seed=0,
    )
    for r in range(5):
        assert trainer.train_round(f"r{r}").trained
    assert evaluate(model, task.test_x, task.test_y) > 0.5
    assert gate.epsilon_spent("p", "digits") <= 8.0


def test_nonprivate_baseline_learns(task):
    parts = dirichlet_split(task.private_y, parts=2, alpha=100.0, seed=0)
    model = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=0)
    assert evaluate(model, task.test_x, task.test_y) < 0.3
    train_nonprivate(
        model,
        task.private_x[parts[0]],
        task.private_y[parts[0]],
        epochs=10,
        lr=0.05,
        batch_size=32,
        seed=0,
    )
    assert evaluate(model, task.test_x, task.test_y) > 0.6


def test_evaluate_validation():
    with pytest.raises(LearningParameterInvalid, match="equal length"):
        evaluate(nn.Linear(2, 2), np.zeros((3, 2), np.float32), np.zeros(2, np.int64))


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_empty_poisson_batches_still_take_noised_steps(name):
    # 3 rows at q = 1/3: a batch is empty with probability 8/27; 30 steps hit some
    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    model = build_model(name, input_shape=(1, 8, 8), num_classes=3, seed=0)
    gate = InMemoryBudgetGate(epsilon=50.0, delta=1e-5)
    trainer = PrivateTrainer(
        model=model,
        x=x,
        y=np.array([0, 1, 2]),
        goal=DPGoal(epsilon=50.0, delta=1e-5, rounds=1),
        budget=gate,
        participant_id="p",
        asset_id="a",
        batch_size=1,
        lr=0.1,
        epochs_per_round=None,
        steps_per_round=30,
    )
    report = trainer.train_round("r1")
    assert report.trained and report.steps == 30
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_sampling_plan_mismatch_aborts(task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = build_model("logreg", input_shape=task.input_shape, num_classes=10, seed=1)
    trainer = _trainer(model, task, gate)
    before = _weights(model)
    trainer.sample_rate = 0.1  # not what Opacus will build from 200 rows at batch 25 (1/8)
    with pytest.raises(PrivateTrainingFailed, match="Poisson plan differs") as e:
        trainer.train_round("r1")
    assert e.value.code == "LEARNING_PRIVATE_TRAINING_FAILED"
    assert _same(before, _weights(model))
    assert gate.epsilon_spent("p1", "digits") == 0.0 and not _held(gate)


class _CommitRefusingGate(InMemoryBudgetGate):
    """A real gate whose commit fails, as the ledger's does for an expired reservation."""

    def commit(self, reservation_id):
        self.abort(reservation_id)
        raise ReservationExpired(f"reservation {reservation_id!r} expired; release nothing")


def test_failed_commit_rolls_the_model_back(task):
    gate = _CommitRefusingGate(epsilon=8.0, delta=1e-5)
    model = build_model("mlp", input_shape=task.input_shape, num_classes=10, seed=1)
    before = _weights(model)
    with pytest.raises(ReservationExpired, match="expired"):
        _trainer(model, task, gate).train_round("r1")
    assert _same(before, _weights(model)) and gate.epsilon_spent("p1", "digits") == 0.0


def test_failure_during_training_rolls_the_model_back(task):
    gate = InMemoryBudgetGate(epsilon=8.0, delta=1e-5)
    model = _Exploding()
    trainer = _trainer(model, task, gate, steps_per_round=3)
    calls = {"n": 0}
    original = model.forward

    def flaky(x):
        calls["n"] += 1
        if calls["n"] == 3:  # fail after two real steps changed the weights
            raise RuntimeError("out of memory")
        return original(x)

    model.forward = flaky
    before = _weights(model)
    with pytest.raises(RuntimeError, match="out of memory"):
        trainer.train_round("r1")
    assert calls["n"] == 3 and _same(before, _weights(model))
    assert gate.epsilon_spent("p1", "digits") == 0.0 and not _held(gate)
