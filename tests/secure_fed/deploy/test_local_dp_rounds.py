"""A ``deploy local`` run gives its participants' DP plans room for the federation's retries.

A round aborted after the participants trained keeps their charge and is run again as
the next round id, at most ``max_retries`` times: each participant's ``[dp] rounds`` is
``rounds + max_retries``, and the node built from its files splits its epsilon over
that many rounds (the first round charges ``epsilon / (rounds + max_retries)``), so a
retried round still finds the participants with a round left.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.local import LocalFederation
from secure_fed.deploy.local_files import LocalLayout, LocalOptions
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.server_config import load_server_config
from secure_fed.errors import FederationConfigInvalid
from secure_fed.federation.config import ASSET_ID
from secure_fed.learning.private_training import PrivateTrainer


def _prepare(run: Path, **extra: int) -> LocalLayout:
    options = LocalOptions(participants=2, mode="shares", rounds=2, run_dir=run, **extra)  # type: ignore[arg-type]
    return LocalFederation(options=options, python=sys.executable, env={}).prepare()


@pytest.mark.parametrize(("retries", "planned"), [(None, 5), (0, 2), (4, 6)])
def test_each_participant_plans_its_rounds_plus_the_retries(
    tmp_path: Path, retries: int | None, planned: int
) -> None:
    layout = _prepare(tmp_path / "run", **({} if retries is None else {"max_retries": retries}))
    server = load_server_config(layout.server_toml)
    assert server.federation.rounds == 2
    assert server.max_retries == (3 if retries is None else retries)
    for toml in layout.participant_tomls.values():
        assert load_participant_config(toml).dp_rounds == planned


def _first_round_charge(layout: LocalLayout, db: Path, **plan: int) -> tuple[int, float]:
    """Open participant 0's node from its files, train round 1 on a ledger of its own.

    Return its plan's rounds and the epsilon the ledger accounts after that round.
    """
    settings = AggregatorNode.open(load_server_config(layout.server_toml)).settings
    config = load_participant_config(layout.participant_tomls[layout.ids[0]])
    node = ParticipantNode.open(dataclasses.replace(config, **plan), settings=settings, index=0)
    trainer = node.handler.participant.trainer
    assert isinstance(trainer, PrivateTrainer)
    assert trainer.goal.epsilon == 8.0
    pid = config.participant_id
    ledger = PrivacyLedger.from_url(f"sqlite:///{db}")
    try:
        ledger.register_participant(pid, institution=pid, kind="hospital")
        ledger.register_asset(pid, ASSET_ID)
        ledger.set_budget(pid, ASSET_ID, epsilon="8", delta=1e-5)
        trainer.budget = ledger
        report = trainer.train_round("r1")
        assert report.trained, report.refused_reason
        return trainer.goal.rounds, float(ledger.epsilon_spent(pid, ASSET_ID))
    finally:
        ledger.engine.dispose()


def test_the_node_spreads_its_epsilon_over_rounds_plus_retries(tmp_path: Path) -> None:
    layout = _prepare(tmp_path / "run")  # 2 rounds, max_retries 3: 5 planned rounds
    planned, spent = _first_round_charge(layout, tmp_path / "own.db")
    assert planned == 5
    # the same node planning --rounds alone: noise for 2 rounds, a larger first charge
    alone, spent_alone = _first_round_charge(layout, tmp_path / "alone.db", dp_rounds=2)
    assert alone == 2
    assert spent < spent_alone < 8.0


@pytest.mark.parametrize("retries", [-1, 101, True, 2.0])
def test_max_retries_outside_the_range_is_refused(tmp_path: Path, retries: object) -> None:
    with pytest.raises(FederationConfigInvalid, match="max_retries"):
        _prepare(tmp_path / "run", max_retries=retries)  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()
