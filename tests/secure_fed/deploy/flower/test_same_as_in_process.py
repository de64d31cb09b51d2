"""Deployed parties, built from their files, publish exactly what the in-process federation does.

Both sides build participants with ``secure_fed.federation.builders`` and the aggregator
with ``secure_fed.federation.aggregator_builder`` from the same settings and seeds; with
seeded DP-SGD noise (insecure, tests only) the plaintext publication is the same bytes.
"""

from __future__ import annotations

from pathlib import Path

from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.server_config import config_from_settings, load_server_config
from secure_fed.federation.config import ASSET_ID, plan_participants
from secure_fed.federation.federation import Federation
from secure_fed.federation.store import JsonFileRoundStore
from secure_fed.learning.data import load_task
from tests.secure_fed.deploy.flower.workspace import write_federation

IDS = ["hospital-1", "bank-2", "hospital-3"]


def _in_process(tmp_path: Path, settings: dict[str, object]) -> tuple[str | None, dict[str, float]]:
    config = config_from_settings(settings, epsilon=8.0, delta=1e-5)
    ledger = PrivacyLedger.from_url(f"sqlite:///{tmp_path / 'in-process.db'}")
    for p in plan_participants(config):
        ledger.register_participant(p.participant_id, institution=p.institution, kind=p.kind)
        ledger.register_asset(p.participant_id, ASSET_ID)
        ledger.set_budget(p.participant_id, ASSET_ID, epsilon="8.0", delta=1e-5)
    federation = Federation(
        config=config,
        task=load_task("digits", seed=config.seed),
        budget=ledger,
        store=JsonFileRoundStore(directory=tmp_path / "in-process-rounds"),
        insecure_noise=True,
    )
    result = federation.run_round()
    assert result.stage == "published"
    state = federation.engine.state(1)
    ledger.engine.dispose()
    return state.publication_sm3, dict(state.weights)


def test_deployed_round_publishes_the_in_process_bytes(tmp_path: Path) -> None:
    server, participants = write_federation(tmp_path, ids=IDS, rounds=2, insecure_noise=True)
    aggregator = AggregatorNode.open(load_server_config(server))
    config = aggregator.handler.open_round(aggregator.round_config(1))
    nodes = [
        ParticipantNode.open(load_participant_config(p), settings=aggregator.settings, index=k)
        for k, p in enumerate(participants)
    ]
    for node in nodes:
        aggregator.handler.handle_upload(node.handle_round(config), round_id=1)
    aggregator.handler.finish_round(1)
    deployed = aggregator.engine.state(1)

    sm3, weights = _in_process(tmp_path, aggregator.settings)
    assert sm3 is not None and len(weights) == len(IDS)
    assert deployed.weights == weights
    assert deployed.publication_sm3 == sm3
