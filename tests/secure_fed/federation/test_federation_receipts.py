"""A federation on a real privacy ledger: every accepted upload carries the ledger's receipt."""

from __future__ import annotations

from pathlib import Path

import pytest

from privacy_ledger import PrivacyLedger
from secure_fed.federation.config import ASSET_ID, FederationConfig, plan_participants
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.data import load_task
from secure_fed.secure.audit import MemoryAuditSink

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_uploads_need_a_committed_charge_and_a_refused_budget_stops_uploads(
    tmp_path: Path,
) -> None:
    config = FederationConfig(
        participants=3,
        rounds=2,
        architectures=("logreg",),
        epochs_per_round=1,
        baseline=False,
        distill=DistillSettings(epochs=1),
    )
    ledger = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'ledger.db'}")
    plan = plan_participants(config)
    for p in plan:
        ledger.register_participant(p.participant_id, institution=p.institution, kind=p.kind)
        ledger.register_asset(p.participant_id, ASSET_ID)
        ledger.set_budget(p.participant_id, ASSET_ID, epsilon="8", delta=1e-5)
    sink = MemoryAuditSink()
    fed = Federation(
        config=config,
        task=load_task("digits", seed=0),
        budget=ledger,
        store=JsonFileRoundStore(directory=tmp_path / "rounds"),
        audit=sink,
    )
    assert fed.receipts is not None and fed.gate.receipts is not None
    first = fed.run_round()
    assert first.stage == "published"
    assert all(r.weight is not None for r in first.rows)  # all three carried receipts
    # another mechanism eats the last participant's budget: it trains no more, so it
    # has no committed charge for round 2, and its upload is refused
    last = plan[-1].participant_id
    ledger.set_budget(last, ASSET_ID, epsilon="0.001", delta=1e-5)
    second = fed.run_round()
    assert second.stage == "published"
    rows = {r.participant_id: r for r in second.rows}
    assert rows[last].weight is None and rows[last].private_training.startswith("stopped")
    assert all(rows[p.participant_id].weight is not None for p in plan[:-1])
    refused = [e for e in sink.named("upload.rejected") if e["round_id"] == 2]
    assert [e["code"] for e in refused] == ["UPLOAD_RECEIPT_MISSING"]
    ledger.engine.dispose()
