"""A node charging the federation's ledger through the API records its audit there, signed.

The gate's own call first: a resend answers the same entry, rounds never charged are
the ledger's ``EmpiricalAuditInvalid``, another participant's budget is denied.

A real ``secure-fed api`` process over TLS (:mod:`tests.secure_fed.deploy.budget_api`),
a real ``participant.toml`` with ``budget.api_url`` and ``audit.canaries = 16``, and
real nodes: after the round, the federation's ledger (not a local file) holds the
participant's ``budget.audited`` entry with the accounted epsilon the server
recomputed, it verifies under the API's log key, and an officer reading the budget
through the API sees it audited.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from api.rest import ApiSettings
from api.rest.context import build_context
from crypto.sm import SM2PrivateKey
from privacy_ledger import MechanismEvent, PrivacyLedger, verify_log
from privacy_ledger.budget.empirical import (
    EmpiricalAuditInvalid,
    accounted_epsilon_over,
    empirical_audits,
)
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.remote_budget import BudgetServiceDenied, RemoteBudgetGate
from secure_fed.deploy.server_config import load_server_config
from secure_fed.federation.config import ASSET_ID
from secure_fed.learning.privacy_audit import AuditResult
from tests.secure_fed.deploy.budget_api import (
    ASSET,
    PARTICIPANTS,
    BudgetApi,
    charge_through,
    running_api,
)
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

AUDITED = PARTICIPANTS[0]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BudgetApi]:
    folder = tmp_path_factory.mktemp("audit-api")
    with running_api(f"sqlite:///{folder / 'ledger.db'}", folder) as running:
        settings = ApiSettings(
            database_url=running.db_url,
            api_audit_key_file=folder / "audit.key.pem",
            api_session_secret=SecretStr("s" * 40),
        )
        ctx = build_context(settings)  # the federation's budgets of the training's asset
        try:
            for pid in PARTICIPANTS:
                ctx.ledger.register_asset(pid, ASSET_ID)
                ctx.ledger.set_budget(pid, ASSET_ID, epsilon="8", delta=1e-5)
        finally:
            ctx.close()
        yield running


def _through_the_api(toml: Path, api: BudgetApi) -> None:
    """Point the node's budget at the API (its token in a 0600 file) instead of its own ledger."""
    charge_through(toml, api, AUDITED, "\n[audit]\ncanaries = 16\n")


def test_a_node_charging_through_the_api_records_its_audit_in_the_federations_ledger(
    tmp_path: Path, api: BudgetApi
) -> None:
    server, participants = write_federation(
        tmp_path / "fed", ids=list(PARTICIPANTS), rounds=1, evidence_rows=0
    )
    _through_the_api(participants[0], api)
    aggregator = AggregatorNode.open(load_server_config(server))
    config = aggregator.handler.open_round(aggregator.round_config(1))
    for k, toml in enumerate(participants):
        node = ParticipantNode.open(
            load_participant_config(toml), settings=aggregator.settings, index=k
        )
        aggregator.handler.handle_upload(node.handle_round(config), round_id=1)

    ledger = PrivacyLedger.from_url(api.db_url, create=False)
    try:
        (recorded,) = empirical_audits(ledger, participant=AUDITED, asset=ASSET_ID)
        audit = recorded.audit
        assert (audit.rounds_from, audit.rounds_to) == ("r1-label-prior", "r1")
        assert audit.canaries == 16 and audit.guesses == 8
        assert audit.epsilon_accounted == accounted_epsilon_over(
            ledger, AUDITED, ASSET_ID, "r1-label-prior", "r1"
        )
        key = SM2PrivateKey.from_pem(
            (api.folder / "audit.key.pem").read_bytes(), passphrase=None
        ).public_key
        verify_log(ledger.engine, public_key=key)
    finally:
        ledger.engine.dispose()
    state = participants[0].parent / "state"
    assert not (state / "audits.jsonl").exists()  # the ledger's entry is the one record
    trusted = ssl.create_default_context(cafile=str(api.endpoint.ca_file))
    with httpx.Client(verify=trusted, trust_env=False) as client:
        shown = client.get(
            f"{api.endpoint.url}/v1/budgets/{AUDITED}/{ASSET_ID}",
            headers={"Authorization": f"Bearer {api.tokens['officer']}"},
        ).json()
    assert shown["empirical_audit"]["entry"] == recorded.index
    assert shown["empirical_label"] == "empirical lower bound (95%, 16 canaries)"


def _result(participant: str, rounds: tuple[str, str], correct: int = 5) -> AuditResult:
    return AuditResult(
        participant=participant,
        asset=ASSET,
        rounds_from=rounds[0],
        rounds_to=rounds[1],
        canaries=16,
        guesses=8,
        correct=correct,
        score="loss",
        confidence="0.95",
        delta="0.00001",
        epsilon_lower_bound="0",
        epsilon_accounted="123",  # the trainer's figure: never what the ledger writes
    )


def test_the_gate_records_an_audit_once_and_refuses_with_the_ledgers_classes(
    api: BudgetApi,
) -> None:
    event = MechanismEvent(
        noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5, max_grad_norm=1.0
    )
    with RemoteBudgetGate(
        base_url=api.endpoint.url, token=api.tokens[AUDITED], ca_file=api.endpoint.ca_file
    ) as gate:
        gate.commit(gate.reserve(AUDITED, ASSET, event, round_id="g1").id)
        first = gate.record_audit(_result(AUDITED, ("g1", "g1")))
        again = gate.record_audit(_result(AUDITED, ("g1", "g1")))
        assert again == first
        with pytest.raises(EmpiricalAuditInvalid, match="not both committed rounds"):
            gate.record_audit(_result(AUDITED, ("g1", "g9")))
        with pytest.raises(BudgetServiceDenied):
            gate.record_audit(_result(PARTICIPANTS[1], ("g1", "g1")))
    ledger = PrivacyLedger.from_url(api.db_url, create=False)
    try:
        found = empirical_audits(ledger, asset=ASSET)
        assert [r.index for r in found] == [first.index]
        assert found[0].audit.epsilon_accounted == accounted_epsilon_over(
            ledger, AUDITED, ASSET, "g1", "g1"
        )
        assert first.audit == found[0].audit
    finally:
        ledger.engine.dispose()
