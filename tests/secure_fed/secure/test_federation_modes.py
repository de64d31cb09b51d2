"""Real predictions (digits, DP-SGD, mixed architectures) through all three modes.

DP-SGD noise is not reproducible between runs, so the three modes get the very
same predictions: those of one trained federation's participants.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crypto.ckks import PRESETS
from secure_fed.federation.config import FederationConfig
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND, predict_public
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes.ckks import PRESET as CKKS_PRESET
from tests.secure_fed.secure.helpers import excluded
from tests.tolerances import aggregate_tolerance, score_tolerance, shares_tolerance

#: The CKKS mode's key epoch preset (every CKKS release of the mode uses it).
SCORING = PRESETS[CKKS_PRESET]

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def _decide(agg, preds):  # type: ignore[no-untyped-def]
    handles = {p: agg.load(enc.encode(m)) for p, (enc, m) in preds.items()}
    scores = agg.score(handles, round_id=1).scores
    out = excluded(scores, dof=9, min_keep=2)
    kept = {p: h for p, h in handles.items() if p not in out}
    labels = agg.reveal(agg.weighted_sum(kept, {p: 1.0 / len(kept) for p in kept}), round_id=1)
    return scores, out, labels


def test_real_predictions_give_the_same_decisions_in_every_mode(tmp_path: Path) -> None:
    task = load_task("digits", seed=0)
    config = FederationConfig(
        participants=5,
        rounds=1,
        architectures=("logreg", "mlp", "cnn"),
        distill=DistillSettings(epochs=1),
        baseline=False,
    )
    fed = Federation(
        config=config,
        task=task,
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
    )
    assert fed.run_round().stage == "published"
    preds = {
        m.participant.participant_id: predict_public(m.participant.model, task.public_x)
        for m in fed.members
    }
    shape = next(iter(preds.values())).shape
    results = {}
    for mode in ("plaintext", "ckks", "shares"):
        dep = SecureDeployment.create(
            mode=mode, shape=shape, participant_ids=sorted(preds), min_participants=2
        )
        agg = dep.aggregator(bound=PUBLIC_LOGIT_BOUND)
        encoded = {p: (dep.encoder(p, bound=PUBLIC_LOGIT_BOUND), m) for p, m in preds.items()}
        results[mode] = _decide(agg, encoded)
    ref_scores, ref_excluded, ref_labels = results["plaintext"]
    for mode in ("ckks", "shares"):
        scores, excluded, labels = results[mode]
        assert excluded == ref_excluded
        for p in preds:
            tolerance = score_tolerance(SCORING, ref_scores[p], values=len(preds))
            assert abs(scores[p] - ref_scores[p]) <= tolerance, (mode, p)
        kept = len(preds) - len(excluded)
        label_tolerance = (
            aggregate_tolerance(SCORING, values=labels.size)
            if mode == "ckks"
            else shares_tolerance(kept)
        )
        assert np.abs(labels - ref_labels).max() <= label_tolerance, mode
