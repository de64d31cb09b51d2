"""A deployed participant releases its label prior once in its life, over restarts.

Each test builds nodes from their files with :meth:`ParticipantNode.open` (a
fresh process rebuilds the participant the same way) over the node's own
SQLite ledger, and counts the ledger's ``-label-prior`` events: a restart
after the prior's release, or between keeping it and committing its charge,
never releases or charges it a second time; a corrupted or altered kept prior
is refused with a typed error before anything is reserved.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from privacy_ledger.budget.service import PrivacyLedger
from privacy_ledger.budget.types import Reservation
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.config_errors import ParticipantStateInvalid
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.participant_state import ParticipantState
from secure_fed.deploy.server_config import load_server_config
from secure_fed.federation.config import ASSET_ID
from secure_fed.federation.stages import RoundConfig
from secure_fed.learning.logit_adjustment import PRIOR_ROUND_SUFFIX, ReleasedPrior
from secure_fed.learning.private_training import PrivateTrainer
from tests.secure_fed.deploy.flower.workspace import write_federation

IDS = ["hospital-1", "bank-2"]
PID = IDS[0]


class Crash(Exception):
    """Stands for the process dying at a chosen point."""


@pytest.fixture
def federation(tmp_path: Path) -> tuple[Path, dict[str, Any], RoundConfig]:
    server, participants = write_federation(tmp_path, ids=IDS, evidence_rows=0, rounds=3)
    aggregator = AggregatorNode.open(load_server_config(server))
    config = aggregator.handler.open_round(aggregator.round_config(1))
    return participants[0], aggregator.settings, config


def _open(toml: Path, settings: dict[str, Any]) -> ParticipantNode:
    return ParticipantNode.open(load_participant_config(toml), settings=settings, index=0)


def _trainer(node: ParticipantNode) -> PrivateTrainer:
    trainer = node.handler.participant.trainer
    assert isinstance(trainer, PrivateTrainer)
    return trainer


def _events(toml: Path) -> list[Reservation]:
    ledger = PrivacyLedger.from_url(f"sqlite:///{toml.parent / 'own-ledger.db'}")
    try:
        return ledger.events(PID, ASSET_ID)
    finally:
        ledger.engine.dispose()


def _priors(toml: Path) -> list[Reservation]:
    return [r for r in _events(toml) if str(r.round_id).endswith(PRIOR_ROUND_SUFFIX)]


def _crash_before_dp_sgd(node: ParticipantNode) -> None:
    def die(*_: object) -> None:
        raise Crash("killed after the prior, before the first DP-SGD step")

    _trainer(node).on_private = die


def _kept(toml: Path) -> ReleasedPrior | None:
    return ParticipantState(directory=toml.parent / "state", participant_id=PID).load_prior()


def test_a_restart_after_the_prior_reuses_it_and_charges_it_once(
    federation: tuple[Path, dict[str, Any], RoundConfig],
) -> None:
    toml, settings, config = federation
    first = _open(toml, settings)
    _crash_before_dp_sgd(first)
    with pytest.raises(Crash):
        first.handle_round(config)  # the prior is out; the round's upload never made
    assert first.state.envelope(1) is None
    kept = _kept(toml)
    assert kept is not None and kept.committed and kept.round_id == "r1" + PRIOR_ROUND_SUFFIX
    charged = _priors(toml)
    assert [(r.id, r.state) for r in charged] == [(kept.reservation_id, "committed")]
    assert charged[0].event.noise_multiplier == kept.noise_multiplier

    again = _open(toml, settings)  # a fresh process
    offset = _trainer(again).logit_offset
    assert offset is not None and torch.equal(offset, kept.offset())
    assert again.handle_round(config)
    later = _open(toml, settings)
    assert later.handle_round(dataclasses.replace(config, round_id=2))

    assert _priors(toml) == charged  # no second release, no second charge
    committed = sorted(str(r.round_id) for r in _events(toml) if r.state == "committed")
    assert committed == ["r1", "r1" + PRIOR_ROUND_SUFFIX, "r2"]
    assert _kept(toml) == kept


class _CommitLost:
    """The real gate, except that the first commit never happens (the process died)."""

    def __init__(self, gate: Any) -> None:
        self.gate, self.lost = gate, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.gate, name)

    def commit(self, reservation_id: str) -> None:
        if not self.lost:
            self.lost = True
            raise Crash("killed between keeping the prior and committing its charge")
        self.gate.commit(reservation_id)


def test_a_restart_between_keeping_the_prior_and_its_commit_finishes_that_charge(
    federation: tuple[Path, dict[str, Any], RoundConfig],
) -> None:
    toml, settings, config = federation
    first = _open(toml, settings)
    trainer = _trainer(first)
    trainer.budget = _CommitLost(trainer.budget)
    with pytest.raises(Crash):
        first.handle_round(config)
    kept = _kept(toml)
    assert kept is not None and not kept.committed
    assert [(r.id, r.state) for r in _priors(toml)] == [(kept.reservation_id, "reserved")]

    again = _open(toml, settings)
    assert _trainer(again).logit_offset is None  # not applied before its charge is committed
    assert again.handle_round(config)
    assert [(r.id, r.state) for r in _priors(toml)] == [(kept.reservation_id, "committed")]
    done = _kept(toml)
    assert done == dataclasses.replace(kept, committed=True)
    offset = _trainer(again).logit_offset
    assert offset is not None and torch.equal(offset, kept.offset())


def _released(toml: Path, settings: dict[str, Any], config: RoundConfig) -> Path:
    node = _open(toml, settings)
    _crash_before_dp_sgd(node)
    with pytest.raises(Crash):
        node.handle_round(config)
    return toml.parent / "state" / "label-prior.json"


def _rewrite(path: Path, **fields: object) -> None:
    data = json.loads(path.read_text())
    data["prior"].update(fields)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_text(p.read_text()[:40]), "unreadable"),
        (lambda p: _rewrite(p, noisy_counts=[500.0] + [1.0] * 9), "does not match its SM3"),
        (lambda p: _rewrite(p, committed=False), "does not match its SM3"),
        (lambda p: p.write_text("[]"), "not a JSON object"),
    ],
    ids=["truncated", "counts-altered", "commit-flag-altered", "not-an-object"],
)
def test_a_corrupted_or_altered_prior_is_refused_and_nothing_is_charged(
    federation: tuple[Path, dict[str, Any], RoundConfig], damage: Any, message: str
) -> None:
    toml, settings, config = federation
    path = _released(toml, settings, config)
    before = _events(toml)
    damage(path)
    with pytest.raises(ParticipantStateInvalid, match=message):
        _open(toml, settings)
    assert _events(toml) == before


def test_a_prior_of_other_settings_with_a_valid_digest_is_refused(
    federation: tuple[Path, dict[str, Any], RoundConfig],
) -> None:
    toml, settings, config = federation
    path = _released(toml, settings, config)
    kept = _kept(toml)
    assert kept is not None
    before = _events(toml)
    state = ParticipantState(directory=toml.parent / "state", participant_id=PID)
    state.save_prior(dataclasses.replace(kept, tau=0.5))  # digest recomputed: only the fit fails
    with pytest.raises(ParticipantStateInvalid, match="differs from the trainer's"):
        _open(toml, settings)
    state.save_prior(dataclasses.replace(kept, noisy_counts=kept.noisy_counts[:3]))
    with pytest.raises(ParticipantStateInvalid, match="differs from the trainer's"):
        _open(toml, settings)
    assert path.exists() and _events(toml) == before
