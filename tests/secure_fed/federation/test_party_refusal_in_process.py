"""In process, a party's refusal at the end of a round aborts that round only, and says why.

The key authority of a CKKS federation refuses every decryption once its key
epoch released what it may (``max_releases``): the next round cannot be scored,
so it is aborted with the refusal's code, audited as ``round.aborted``, and
nothing is published; the federation itself goes on (the call returns).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.federation.config import FederationConfig
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.learning.data import load_task
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.parties.key_authority import KeyAuthority

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_an_exhausted_key_epoch_aborts_the_round_not_the_federation(tmp_path: Path) -> None:
    config = FederationConfig(
        participants=3,
        rounds=2,
        mode="ckks",
        architectures=("logreg",),
        epochs_per_round=1,
        baseline=False,
        distill=DistillSettings(epochs=1),
    )
    sink = MemoryAuditSink()
    fed = Federation(
        config=config,
        task=load_task("digits", seed=0),
        budget=InMemoryBudgetGate(epsilon=8.0, delta=1e-5),
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
        audit=sink,
    )
    first = fed.run_round()
    assert first.stage == "published"
    authority = fed.deployment.authority  # type: ignore[attr-defined]
    assert isinstance(authority, KeyAuthority)
    authority.max_releases = 1  # round 1 released more than one: every epoch is spent
    second = fed.run_round()
    assert second.stage == "aborted"
    assert second.reason is not None and "rotate the keys" in second.reason, second.reason
    assert all(row.weight is None for row in second.rows)
    aborted = sink.named("round.aborted")
    assert [(e["round"], e["stage"]) for e in aborted] == [(2, "filtering")], aborted
