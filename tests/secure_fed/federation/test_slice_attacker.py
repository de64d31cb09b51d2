"""An attacker who has read this code cannot predict the labeled slice, so it cannot game it.

The attacker is a participant of a real federation (the project's round engine,
weighting and modes). It answers the rows it predicts to be the round's slice
confidently and correctly (the built-in data's labels are public, so it knows
them) and sign-flips its logits everywhere else. Its best prediction is what
this code would draw if the slice's key followed from the seed it knows. With
the secret key of every normal run, that guess overlaps the real slice only by
chance, and its evidence is what a random guess earns; with the predictable key
of a ``--reproducible`` run, the same attacker is right on every slice row and
takes the top evidence, which is what a slice drawn from the run seed allowed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secure_fed.evaluation.attacks import Attack
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.evidence import EvidencePool
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import TaskData, load_task
from secure_fed.secure.audit import MemoryAuditSink

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SEED = 0
ROWS = 100


def _slice_aware(task: TaskData, predicted: tuple[int, ...]) -> Attack:
    """Confident and right on ``predicted``, sign-flipped on every other row."""
    assert task.public_y is not None
    labels = task.public_y

    def send(honest: np.ndarray) -> np.ndarray:
        sent = -honest
        rows = np.asarray(predicted)
        sent[rows] = -8.0
        sent[rows, labels[rows]] = 8.0
        return sent

    return Attack.hook(send)


def _run(tmp_path: Path, *, mode: str, reproducible: bool) -> tuple[Federation, dict[str, float]]:
    task = load_task("digits", seed=SEED)
    config = FederationConfig(
        participants=4,
        rounds=1,
        architectures=("logreg", "mlp"),
        distill=DistillSettings(epochs=1),
        baseline=False,
        mode=mode,
        seed=SEED,
        evidence_rows=ROWS,
    )
    fed = Federation(
        config=config,
        task=task,
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
        insecure_noise=reproducible,
    )
    guess = EvidencePool.insecure_from_seed(task, rows=ROWS, seed=SEED)
    assert guess is not None
    attacker = fed.members[-1]
    attacker.handler.participant.attack = _slice_aware(task, guess.for_round(1).rows)
    fed.run()
    assert isinstance(fed.audit, MemoryAuditSink)
    evidence = {
        str(e["participant_id"]): float(e["evidence"])  # type: ignore[arg-type]
        for e in fed.audit.named("outlier.decision")
    }
    return fed, evidence


def _perfect(num_classes: int) -> float:
    """The evidence of logits +8 on the true class and -8 elsewhere on every slice row."""
    return 8.0 - (8.0 - 8.0 * (num_classes - 1)) / num_classes


@pytest.mark.parametrize("mode", ["plaintext", "shares"])
def test_an_attacker_who_knows_every_seed_cannot_predict_the_slice(
    tmp_path: Path, mode: str
) -> None:
    fed, evidence = _run(tmp_path, mode=mode, reproducible=False)
    attacker = fed.members[-1].handler.participant.participant_id
    assert fed.engine.evidence is not None
    actual = set(fed.engine.evidence.for_round(1).rows)
    guess = EvidencePool.insecure_from_seed(fed.task, rows=ROWS, seed=SEED)
    assert guess is not None
    overlap = len(actual & set(guess.for_round(1).rows))
    expected = ROWS * ROWS / len(fed.task.public_x)  # a random guess's (hypergeometric mean)
    assert overlap < expected + 4 * np.sqrt(expected)  # chance, nothing better
    # right only where the guess met the slice by chance: far from what knowing it gives
    assert evidence[attacker] < 0.5 * _perfect(fed.task.num_classes)


def test_a_predictable_slice_lets_the_same_attacker_take_the_top_evidence(
    tmp_path: Path,
) -> None:
    """The control: with the slice's key derived from the seed the attack works."""
    fed, evidence = _run(tmp_path, mode="plaintext", reproducible=True)
    attacker = fed.members[-1].handler.participant.participant_id
    assert evidence[attacker] == pytest.approx(_perfect(fed.task.num_classes))
    assert evidence[attacker] > max(v for p, v in evidence.items() if p != attacker)
