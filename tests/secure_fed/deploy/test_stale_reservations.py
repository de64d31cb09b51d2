"""A restarted participant node releases its own stale reservations, audited, and no others.

A real participant process (:mod:`tests.secure_fed.deploy.stale_holder`) reserves
through the node's journalled gate and is killed with ``SIGKILL``; a later
process of the same node releases what it held through the ledger's abort
(``budget.aborted`` in the ledger's audit log), on the node's own ledger
(SQLite; PostgreSQL) and through a real ``secure-fed api`` process over TLS
(SQLite; PostgreSQL). Never released: a reservation a live process holds, one
the ledger committed before its process died, and one this node's journal
cannot prove it made (another process's reservation named in a planted file).
A real node releases the stale reservation before it trains the round.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.rest import ApiSettings
from api.rest.context import build_context
from crypto.sm import SM2PrivateKey
from privacy_ledger import PrivacyLedger
from privacy_ledger.audit.models import AuditEntryRow
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode, _budget_gate, _round_of
from secure_fed.deploy.participant_state import BudgetRecorder, ParticipantState
from secure_fed.deploy.server_config import load_server_config
from secure_fed.federation.config import ASSET_ID
from tests.secure_fed.deploy.budget_api import PARTICIPANTS, running_api
from tests.secure_fed.deploy.flower.workspace import write_federation
from tests.secure_fed.deploy.stale_holder import EVENT

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

PID = PARTICIPANTS[0]
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Node:
    """A node's ``participant.toml`` and server, and the URL of the ledger it charges."""

    toml: Path
    server: Path
    ledger_url: str


def _budget_section(toml: Path, section: str) -> None:
    text = toml.read_text(encoding="utf-8")
    toml.write_text(text[: text.index("[budget]")] + section, encoding="utf-8")


@pytest.fixture(
    params=[
        "own-sqlite",
        pytest.param("own-postgres", marks=pytest.mark.postgres),
        "api-sqlite",
        pytest.param("api-postgres", marks=pytest.mark.postgres),
    ]
)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    server, participants = write_federation(
        tmp_path / "fed", ids=list(PARTICIPANTS), rounds=2, evidence_rows=0
    )
    toml = participants[0]
    where, backend = str(request.param).split("-")
    if backend == "postgres":
        from tests.privacy_ledger.conftest import pg_schema

        schemas = pg_schema("stale_")
        url = schemas.__enter__()
        request.addfinalizer(lambda: schemas.__exit__(None, None, None))
    else:
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    if where == "own":
        if backend == "postgres":
            key = tmp_path / "own-log-key.pem"
            key.write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
            key.chmod(0o600)
            _budget_section(toml, f'[budget]\nledger_url = "{url}"\naudit_key = "{key}"\n')
        else:
            url = f"sqlite:///{toml.parent / 'own-ledger.db'}"
        yield Node(toml=toml, server=server, ledger_url=url)
        return
    with running_api(url, tmp_path / "api") as api:
        ctx = build_context(
            ApiSettings(
                database_url=api.db_url,
                api_audit_key_file=api.folder / "audit.key.pem",
                api_session_secret=SecretStr("s" * 40),
            )
        )
        try:  # the budget of the asset the node trains
            ctx.ledger.register_asset(PID, ASSET_ID)
            ctx.ledger.set_budget(PID, ASSET_ID, epsilon="8", delta=1e-5)
        finally:
            ctx.close()
        token = toml.parent / "api-token"
        token.write_text(api.tokens[PID] + "\n", encoding="utf-8")
        token.chmod(0o600)
        _budget_section(
            toml,
            f'[budget]\napi_url = "{api.endpoint.url}"\ntoken_file = "api-token"\n'
            f'ca_file = "{api.endpoint.ca_file}"\n',
        )
        yield Node(toml=toml, server=server, ledger_url=api.db_url)


def _killed_holder(node: Node, mode: str) -> str:
    """Run a participant process that reserves (``mode``), kill it with SIGKILL; its id."""
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.secure_fed.deploy.stale_holder", mode, str(node.toml)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        held = holder.stdout.readline().strip()
        assert held, "the holder reserved nothing"
        return held
    finally:
        holder.kill()  # by the pid started here
        holder.wait(timeout=60)


def _live_holder(node: Node) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.secure_fed.deploy.stale_holder", "hold", str(node.toml)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _recorder(node: Node) -> BudgetRecorder:
    """The gate a restarted node builds from its files (as ParticipantNode.open does)."""
    config = load_participant_config(node.toml)
    state = ParticipantState(directory=config.state_dir, participant_id=PID)
    return BudgetRecorder(gate=_budget_gate(config), state=state, round_of=_round_of)


def _states(node: Node) -> dict[str, str]:
    ledger = PrivacyLedger.from_url(node.ledger_url, create=False)
    try:
        return {r.id: r.state for r in ledger.events(PID, ASSET_ID)}
    finally:
        ledger.engine.dispose()


def _aborted_entries(node: Node) -> list[str]:
    """Reservation ids of the ``budget.aborted`` entries of the ledger's audit log."""
    ledger = PrivacyLedger.from_url(node.ledger_url, create=False)
    try:
        with Session(ledger.engine) as session:
            rows = session.execute(
                select(AuditEntryRow)
                .where(AuditEntryRow.event == "budget.aborted")
                .order_by(AuditEntryRow.entry_index)
            )
            return [str(json.loads(r.entry)["fields"]["reservation"]) for r in rows.scalars()]
    finally:
        ledger.engine.dispose()


def _pending(node: Node) -> list[str]:
    return sorted(p.stem for p in (node.toml.parent / "state" / "pending").glob("*.json"))


def test_a_restarted_node_releases_what_a_dead_process_held_and_nothing_else(node: Node) -> None:
    live = _live_holder(node)
    try:
        assert live.stdout is not None
        held_live = live.stdout.readline().strip()
        dead = _killed_holder(node, "hold")
        charged = _killed_holder(node, "charged")
        restarted = _recorder(node)
        # another process's reservation, named in a planted pending file
        other = restarted.gate.reserve(PID, ASSET_ID, EVENT, round_id="r1")
        planted = node.toml.parent / "state" / "pending" / f"{other.id}.json"
        planted.write_text(
            json.dumps(
                {
                    "participant_id": PID,
                    "asset_id": ASSET_ID,
                    "round_id": "r1",
                    "request_id": secrets.token_urlsafe(24),
                    "reservation_id": other.id,
                }
            ),
            encoding="utf-8",
        )
        assert _states(node)[dead] == "reserved"

        assert restarted.release_stale() == [dead]

        states = _states(node)
        assert states[dead] == "aborted"  # released through the ledger's abort
        assert states[held_live] == "reserved"  # a live process holds it
        assert states[charged] == "committed"  # a committed charge is never refunded
        assert states[other.id] == "reserved"  # not provably this node's
        assert _aborted_entries(node) == [dead]  # the release is an audit entry
        assert _pending(node) == sorted([held_live, other.id])
        record = restarted.state.record(1)
        assert {"id": dead, "state": "released"} in record["resolved"]
        assert restarted.release_stale() == []  # nothing more, on a second restart
    finally:
        live.kill()  # by the pid started here
        live.wait(timeout=60)
    assert restarted.release_stale() == [held_live]  # its process is gone now
    assert _states(node)[held_live] == "aborted"


@pytest.mark.parametrize("node", ["own-sqlite", "api-sqlite"], indirect=True)
def test_a_restarted_node_frees_the_stale_reservation_before_it_trains(node: Node) -> None:
    dead = _killed_holder(node, "hold")
    aggregator = AggregatorNode.open(load_server_config(node.server))
    config = aggregator.handler.open_round(aggregator.round_config(1))
    participant = ParticipantNode.open(
        load_participant_config(node.toml), settings=aggregator.settings, index=0
    )
    assert participant.handle_round(config)
    states = _states(node)
    assert states.pop(dead) == "aborted"
    assert set(states.values()) == {"committed"}  # the round's own charges
    assert _pending(node) == []
