"""Canaries stay inside the participant: uploads are predictions on the public set, row for row.

A federation with the audit on (plaintext mode, so the upload can be read): each
participant's DP-SGD rows hold its included canaries, yet what it uploads is
exactly its model's bounded predictions on the public set, one row per public row,
and none of its canaries is a public row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from secure_fed.federation.config import FederationConfig
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.federation import Federation
from secure_fed.federation.messages import decode_upload
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND, predict_public
from secure_fed.learning.privacy_audit import AuditSettings
from secure_fed.learning.private_training import PrivateTrainer
from secure_fed.wire import decode_matrix

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_uploads_hold_public_predictions_only(tmp_path: Path) -> None:
    task = load_task("digits", seed=0)
    config = FederationConfig(
        participants=3,
        rounds=1,
        mode="plaintext",
        architectures=("logreg", "mlp"),
        epochs_per_round=1,
        baseline=False,
        distill=DistillSettings(epochs=1),
        privacy_audit=AuditSettings(canaries=16),
    )
    fed = Federation(
        config=config,
        task=task,
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
    )
    assert fed.run_round().stage == "published"
    round_config = fed.aggregator.open_round(fed.round_config(2))
    for member in fed.members:
        participant = member.participant
        trainer = participant.trainer
        assert isinstance(trainer, PrivateTrainer) and trainer.audit is not None
        canaries = trainer.audit.canaries
        assert len(trainer.audits) == 1 and trainer.audit.included > 0
        assert np.array_equal(participant.public_x, task.public_x)
        flat_public = task.public_x.reshape(len(task.public_x), -1)
        for row in canaries.x.reshape(len(canaries.x), -1):
            assert not (flat_public == row).all(axis=1).any()
        _, payload = decode_upload(participant.upload(round_config), max_bytes=1 << 26)
        uploaded = decode_matrix(payload)
        assert uploaded.shape == (len(task.public_x), task.num_classes)
        expected = np.clip(
            predict_public(participant.model, task.public_x),
            -PUBLIC_LOGIT_BOUND,
            PUBLIC_LOGIT_BOUND,
        )
        assert np.array_equal(uploaded, expected.astype(np.float32))
