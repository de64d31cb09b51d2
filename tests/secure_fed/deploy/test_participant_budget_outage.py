"""A participant node rides out a budget API that is down for a while, and gives up in bound.

Real nodes (:meth:`ParticipantNode.open` from their files) charging a real
``secure-fed api`` process over TLS (:mod:`tests.secure_fed.deploy.budget_api`):
an API whose port refuses connections when the round starts and that comes up
1.5 s later is waited for, and the round trains, uploads and is charged once; an
API that never comes up fails the round with ``DEPLOY_BUDGET_SERVICE_UNAVAILABLE``
after ``budget.retry_seconds``, with nothing made to upload.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from api.rest import ApiSettings
from api.rest.context import build_context
from privacy_ledger import PrivacyLedger
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.remote_budget import BudgetServiceUnavailable
from secure_fed.deploy.server_config import load_server_config
from secure_fed.federation.config import ASSET_ID
from secure_fed.federation.stages import RoundConfig
from tests.secure_fed.deploy.budget_api import PARTICIPANTS, BudgetApi, charge_through, running_api
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PID = PARTICIPANTS[0]


def _node(tmp_path: Path, api: BudgetApi, extra: str = "") -> tuple[ParticipantNode, RoundConfig]:
    """The first participant's node, charging ``api``, and the aggregator's round 1."""
    ctx = build_context(
        ApiSettings(
            database_url=api.db_url,
            api_audit_key_file=api.folder / "audit.key.pem",
            api_session_secret=SecretStr("s" * 40),
        )
    )
    try:
        ctx.ledger.register_asset(PID, ASSET_ID)
        ctx.ledger.set_budget(PID, ASSET_ID, epsilon="8", delta=1e-5)
    finally:
        ctx.close()
    server, participants = write_federation(
        tmp_path / "fed", ids=list(PARTICIPANTS), rounds=1, evidence_rows=0
    )
    toml = participants[0]
    charge_through(toml, api, PID, extra)
    aggregator = AggregatorNode.open(load_server_config(server))
    config = aggregator.handler.open_round(aggregator.round_config(1))
    node = ParticipantNode.open(
        load_participant_config(toml), settings=aggregator.settings, index=0
    )
    return node, config


def test_a_node_waits_for_a_budget_api_that_comes_up_late_and_trains_the_round(
    tmp_path: Path,
) -> None:
    with running_api(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path, start=False) as api:
        node, config = _node(tmp_path, api)
        outcome: list[object] = []

        def round_one() -> None:
            try:
                outcome.append(node.handle_round(config))
            except Exception as exc:  # noqa: BLE001 - handed to the test's thread
                outcome.append(exc)

        worker = threading.Thread(target=round_one)
        worker.start()
        time.sleep(1.5)  # the API is down meanwhile (the fault's length, not an assertion)
        api.supervisor.start(api.spec)  # from this thread: the child lives as long as it
        worker.join(timeout=600)
        (envelope,) = outcome
        assert isinstance(envelope, bytes) and envelope == node.state.envelope(1)
        ledger = PrivacyLedger.from_url(api.db_url, create=False)
        try:
            states = sorted((str(r.round_id), r.state) for r in ledger.events(PID, ASSET_ID))
        finally:
            ledger.engine.dispose()
    assert states == [("r1", "committed"), ("r1-label-prior", "committed")]  # charged once


def test_a_node_gives_up_on_a_budget_api_that_never_comes_up_with_the_typed_error(
    tmp_path: Path,
) -> None:
    with running_api(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path, start=False) as api:
        node, config = _node(tmp_path, api, extra="retry_seconds = 2\n")
        with pytest.raises(BudgetServiceUnavailable, match="retry_seconds 2") as raised:
            node.handle_round(config)
    assert raised.value.code == "DEPLOY_BUDGET_SERVICE_UNAVAILABLE"
    assert node.state.envelope(1) is None  # nothing made to upload
