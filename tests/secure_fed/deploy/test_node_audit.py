"""A deployed participant audits itself: same canaries across messages, entries in its ledger.

Real ``participant.toml`` files (``audit.canaries = 16``) and real nodes, rebuilt for
every message as the ClientApp does: the canaries and coins drawn by the first build
are the ones every later build trains with, and each round's audit is a signed
``budget.audited`` entry of the node's own ledger, which verifies with the log's key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crypto.sm import SM2PublicKey
from privacy_ledger import verify_log
from privacy_ledger.budget.empirical import empirical_audits
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.config_errors import ParticipantConfigInvalid, ParticipantStateInvalid
from secure_fed.deploy.node_audit import CANARIES
from secure_fed.deploy.node_ledger import OWN_PUBLIC_KEY
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.server_config import load_server_config
from secure_fed.learning.private_training import PrivateTrainer
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

IDS = ["hospital-1", "bank-2", "hospital-3"]


def _node(toml: Path, settings: dict[str, object], index: int) -> ParticipantNode:
    return ParticipantNode.open(load_participant_config(toml), settings=settings, index=index)


def test_a_node_keeps_its_canaries_and_records_each_audit(tmp_path: Path) -> None:
    server, participants = write_federation(tmp_path, ids=IDS, evidence_rows=0)
    audited = participants[0]
    with audited.open("a", encoding="utf-8") as handle:
        handle.write("\n[audit]\ncanaries = 16\n")
    aggregator = AggregatorNode.open(load_server_config(server))
    kept = b""
    for rid in (1, 2):
        config = aggregator.handler.open_round(aggregator.round_config(rid))
        for k, toml in enumerate(participants):
            node = _node(toml, aggregator.settings, k)
            if k == 0:
                trainer = node.handler.participant.trainer
                assert isinstance(trainer, PrivateTrainer) and trainer.audit is not None
                if kept:  # a rebuilt node trains with the canaries of its first build
                    assert (audited.parent / "state" / CANARIES).read_bytes() == kept
            aggregator.handler.handle_upload(node.handle_round(config), round_id=rid)
            kept = kept or (audited.parent / "state" / CANARIES).read_bytes()
        publication = aggregator.handler.finish_round(rid)
        for k, toml in enumerate(participants):
            _node(toml, aggregator.settings, k).handle_publication(publication)
    assert (audited.parent / "state" / CANARIES).stat().st_mode & 0o777 == 0o600
    ledger = PrivacyLedger.from_url(f"sqlite:///{audited.parent / 'own-ledger.db'}")
    try:
        audits = [r.audit for r in empirical_audits(ledger, participant=IDS[0])]
        assert [(a.rounds_from, a.rounds_to) for a in audits] == [
            ("r1-label-prior", "r1"),
            ("r1-label-prior", "r2"),
        ]
        assert all(a.canaries == 16 and a.guesses == 8 for a in audits)
        key = SM2PublicKey.from_pem((audited.parent / OWN_PUBLIC_KEY).read_bytes())
        verify_log(ledger.engine, public_key=key)
    finally:
        ledger.engine.dispose()
    for toml in participants[1:]:  # no audit configured: no canaries kept
        assert not (toml.parent / "state" / CANARIES).exists()


def test_kept_canaries_of_another_audit_are_refused(tmp_path: Path) -> None:
    server, participants = write_federation(tmp_path, ids=IDS[:2], evidence_rows=0)
    with participants[0].open("a", encoding="utf-8") as handle:
        handle.write("\n[audit]\ncanaries = 16\n")
    settings = AggregatorNode.open(load_server_config(server)).settings
    _node(participants[0], settings, 0)
    text = participants[0].read_text(encoding="utf-8").replace("canaries = 16", "canaries = 32")
    participants[0].write_text(text, encoding="utf-8")
    with pytest.raises(ParticipantStateInvalid, match="a changed audit needs a new state"):
        _node(participants[0], settings, 0)


@pytest.mark.parametrize("value", ["2", "-1", "true", '"64"'])
def test_a_bad_canary_count_is_refused_naming_the_field(tmp_path: Path, value: str) -> None:
    _, participants = write_federation(tmp_path, ids=IDS[:2], evidence_rows=0)
    with participants[0].open("a", encoding="utf-8") as handle:
        handle.write(f"\n[audit]\ncanaries = {value}\n")
    with pytest.raises(ParticipantConfigInvalid) as caught:
        load_participant_config(participants[0])
    assert caught.value.field == "audit.canaries"
