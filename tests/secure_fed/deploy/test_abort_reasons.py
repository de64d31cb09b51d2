"""A round's stored abort reason names the party service that failed, when the aggregator knows.

A real aggregator (plaintext, its own SQLite ledger) whose ``server.toml`` names a
helper at a port nobody listens on; the party failures are the transport's own
errors, raised by a real request to that port.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.errors import PartyUnavailable
from secure_fed.deploy.server_config import load_server_config
from secure_fed.deploy.supervisor import free_port
from secure_fed.deploy.transport import remote_helper
from secure_fed.errors import TooFewParticipants
from tests.secure_fed.deploy.flower.workspace import write_federation

IDS = ["hospital-1", "bank-2", "hospital-3"]


@pytest.fixture
def down() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def aggregator(tmp_path: Path, down: str) -> AggregatorNode:
    parties = f'\n[parties]\nhelper_url = "{down}"\n'
    server, _ = write_federation(tmp_path, ids=IDS, evidence_rows=0, extra=parties)
    node = AggregatorNode.open(load_server_config(server))
    node.handler.open_round(node.round_config(1))
    return node


def _failure(url: str) -> PartyUnavailable:
    with pytest.raises(PartyUnavailable) as failed:
        remote_helper(url, tls=None, timeout=5)(b"request")
    return failed.value


def test_too_few_uploads_because_the_helper_is_down_names_the_helper(
    aggregator: AggregatorNode, down: str
) -> None:
    error = _failure(down)
    for pid in IDS[:2]:  # what the ServerApp records from a node's coded reply
        aggregator.record_dropout(1, pid, f"sent no upload: {error.code}: {error.message}")
    aggregator.record_dropout(1, IDS[2], "no reply before the round's deadline")
    with pytest.raises(TooFewParticipants, match="helper unavailable"):
        aggregator.handler.finish_round(1)
    state = aggregator.engine.state(1)
    assert state.stage.value == "aborted"
    assert state.reason == (
        "helper unavailable: DEPLOY_PARTY_UNAVAILABLE (the cause of 2 of 3 missing uploads); "
        "only 0 of the required 2 participants uploaded"
    )


def test_an_upload_refused_because_a_party_is_down_names_it(
    aggregator: AggregatorNode, down: str
) -> None:
    error = _failure(down)
    aggregator.record_refusal(1, error)
    with pytest.raises(TooFewParticipants):
        aggregator.handler.finish_round(1)
    assert str(aggregator.engine.state(1).reason).startswith(
        "helper unavailable: DEPLOY_PARTY_UNAVAILABLE (the cause of 1 of 1 missing uploads)"
    )


def test_a_failed_request_of_the_aggregator_names_the_party_in_the_stored_reason(
    aggregator: AggregatorNode, down: str
) -> None:
    error = _failure(down)
    aggregator.abort_round(1, reason=f"{error.code}: {error.message}")  # the ServerApp's call
    reason = str(aggregator.engine.state(1).reason)
    assert reason.startswith(f"helper unavailable: DEPLOY_PARTY_UNAVAILABLE: {down}/v1/helper")


def test_too_few_uploads_with_no_party_failure_keeps_the_engine_s_count(
    aggregator: AggregatorNode,
) -> None:
    for pid in IDS:
        aggregator.record_dropout(1, pid, "no reply before the round's deadline")
    with pytest.raises(TooFewParticipants):
        aggregator.handler.finish_round(1)
    reason = aggregator.engine.state(1).reason
    assert reason == "only 0 of the required 2 participants uploaded"
