"""Restarts: a participant answers an uploaded round again without retraining or a second charge;
a restarted aggregator aborts the round it left unfinished and goes on with the next."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sqlalchemy import create_engine, text

from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.config_errors import ParticipantStateInvalid
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.participant_state import ParticipantState
from secure_fed.deploy.server_config import load_server_config
from secure_fed.federation.config import ASSET_ID
from tests.secure_fed.deploy.flower.workspace import write_federation

IDS = ["hospital-1", "bank-2", "hospital-3"]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, list[Path]]:
    return write_federation(tmp_path, ids=IDS, evidence_rows=0)


def _node(participant: Path, settings: dict[str, object], index: int) -> ParticipantNode:
    return ParticipantNode.open(
        load_participant_config(participant), settings=settings, index=index
    )


def _charges(participant: Path, pid: str) -> list[str]:
    url = f"sqlite:///{participant.parent / 'own-ledger.db'}"
    ledger = PrivacyLedger.from_url(url)
    try:
        return [r.state for r in ledger.events(pid, ASSET_ID)]
    finally:
        ledger.engine.dispose()


def test_a_restarted_participant_resends_its_envelope_without_a_second_charge(
    files: tuple[Path, list[Path]],
) -> None:
    server, participants = files
    aggregator = AggregatorNode.open(load_server_config(server))
    config = aggregator.handler.open_round(aggregator.round_config(1))
    first = _node(participants[0], aggregator.settings, 0).handle_round(config)
    charged = _charges(participants[0], IDS[0])
    assert charged and set(charged) == {"committed"}

    again = _node(participants[0], aggregator.settings, 0)  # a fresh process: rebuilt from files
    assert again.handle_round(config) == first
    assert _charges(participants[0], IDS[0]) == charged
    saved = torch.load(participants[0].parent / "state" / "model.pt", weights_only=True)
    for name, tensor in again.handler.participant.model.state_dict().items():
        assert torch.equal(tensor, saved[name])

    for k, toml in enumerate(participants[1:], start=1):
        aggregator.handler.handle_upload(
            _node(toml, aggregator.settings, k).handle_round(config), round_id=1
        )
    aggregator.handler.handle_upload(first, round_id=1)
    publication = aggregator.handler.finish_round(1)
    assert _node(participants[0], aggregator.settings, 0).handle_publication(publication)[
        "distilled"
    ]
    repeat = _node(participants[0], aggregator.settings, 0).handle_publication(publication)
    assert repeat == {"round_id": 1, "distilled": False, "reason": "already distilled"}
    record = json.loads(
        (participants[0].parent / "state" / "rounds" / "r00000001.json").read_text()
    )
    assert record["distilled"] is True and len(record["envelope_sm3"]) == 64


def test_a_restarted_aggregator_aborts_the_unfinished_round_and_goes_on(
    files: tuple[Path, list[Path]],
) -> None:
    server, participants = files
    first = AggregatorNode.open(load_server_config(server))
    config = first.handler.open_round(first.round_config(1))
    envelope = _node(participants[1], first.settings, 1).handle_round(config)
    first.handler.handle_upload(envelope, round_id=1)

    restarted = AggregatorNode.open(load_server_config(server))
    assert restarted.abort_unfinished() == [1]
    assert list(restarted.next_round_ids()) == [2]
    assert restarted.engine.state(1).stage.value == "aborted"
    assert restarted.abort_unfinished() == []
    engine = create_engine(f"sqlite:///{server.parent / 'ledger.db'}")
    with engine.connect() as conn:
        entries = [
            bytes(row[0]).decode()
            for row in conn.execute(
                text("SELECT entry FROM audit_entries WHERE event = 'round.aborted'")
            )
        ]
    engine.dispose()
    assert len(entries) == 1
    assert "the ServerApp restarted while the round was 'collecting'" in entries[0]


def test_a_state_directory_of_another_participant_is_refused(tmp_path: Path) -> None:
    ParticipantState(directory=tmp_path / "state", participant_id="hospital-1")
    with pytest.raises(ParticipantStateInvalid, match="belongs to 'hospital-1'"):
        ParticipantState(directory=tmp_path / "state", participant_id="bank-2")
