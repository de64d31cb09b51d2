"""A ServerApp restarted after publishing a round sends that round's publication again.

Driven through :func:`run_federation` on a :class:`LoopbackGrid` (the real
ClientApp answers in this process): the first ServerApp publishes round 1 and
is killed pushing round 2; the second aborts round 2, reads round 1's
publication back from the store and carries it in round 3's messages, then is
killed pushing round 3's publication; the third has no round left and sends
round 3's publication alone. A stored publication that was altered is refused
before any message goes out: by its own checks when the change went through the
ledger, by the ledger seal when it did not.

Marked slow: two ServerApp runs with real DP-SGD training and distillation
(four trainings, six distillations; about 20 s of CPU), shared by every test here.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto.sm.sm3 import sm3_digest
from privacy_ledger.errors import RowAltered
from privacy_ledger.rounds import RoundStore
from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.errors import StoredPublicationInvalid
from secure_fed.deploy.flower.messages import HELLO, PUBLICATION, ROUND
from secure_fed.deploy.flower.server_app import RoundsNotPublished, run_federation
from secure_fed.deploy.server_config import load_server_config
from secure_fed.federation.messages import decode_publication, encode_publication
from tests.secure_fed.deploy.flower.loopback import LoopbackGrid, ServerAppKilled
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.slow

IDS = ["hospital-1", "bank-2"]
NODES = (101, 102)


@dataclasses.dataclass
class Restarted:
    server: Path
    participants: list[Path]
    first: LoopbackGrid
    second: LoopbackGrid


def _grid(participants: list[Path], kill: Any = None) -> LoopbackGrid:
    return LoopbackGrid(dict(zip(NODES, participants, strict=True)), kill=kill)


def _run(server: Path, grid: LoopbackGrid) -> dict[int, str]:
    node = AggregatorNode.open(load_server_config(server))
    try:
        with grid.serving():
            return run_federation(grid, node)
    finally:
        node.audit.engine.dispose()  # type: ignore[attr-defined]


def _short(server: Path, grid: LoopbackGrid) -> dict[int, str]:
    """A run after round 2 was lost to the restart: 2 of 3 published, said by a typed error."""
    with pytest.raises(RoundsNotPublished) as short:
        _run(server, grid)
    assert (short.value.code, short.value.published, short.value.wanted) == (
        "DEPLOY_ROUNDS_NOT_PUBLISHED",
        2,
        3,
    )
    return short.value.outcomes


def _killed(server: Path, grid: LoopbackGrid) -> None:
    with pytest.raises(ServerAppKilled):
        _run(server, grid)


def _stored(server: Path, round_id: int) -> dict[str, Any]:
    node = AggregatorNode.open(load_server_config(server))
    try:
        state = node.engine.store.load(round_id)
    finally:
        node.audit.engine.dispose()  # type: ignore[attr-defined]
    assert state is not None
    return state.to_dict()


def _record(participant: Path, round_id: int) -> dict[str, Any]:
    path = participant.parent / "state" / "rounds" / f"r{round_id:08d}.json"
    record: dict[str, Any] = json.loads(path.read_text())
    return record


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Restarted:
    root = tmp_path_factory.mktemp("restart-publication")
    server, participants = write_federation(root, ids=IDS, rounds=3, evidence_rows=0)
    first = _grid(participants, kill=lambda m: m.metadata.group_id == "2")
    _killed(server, first)
    second = _grid(participants, kill=lambda m: m.metadata.message_type == PUBLICATION)
    _killed(server, second)
    return Restarted(server, participants, first, second)


def test_the_first_round_after_a_restart_carries_the_published_round(
    restarted: Restarted,
) -> None:
    published = {s.node_id: s.payload for s in restarted.first.of_type(ROUND) if s.group_id == "2"}
    assert set(published) == set(NODES)  # round 1 was published: round 2 carried it, then death
    stored = _stored(restarted.server, 1)
    assert stored["stage"] == "published"
    assert base64.b64decode(stored["publication"]) == published[NODES[0]] == published[NODES[1]]

    rounds = restarted.second.of_type(ROUND)
    assert {s.group_id for s in rounds} == {"3"}  # round 2 was aborted, never sent again
    assert {s.node_id: s.payload for s in rounds} == published
    assert _stored(restarted.server, 2)["stage"] == "aborted"
    for participant in restarted.participants:
        assert _record(participant, 1)["distilled"] is True  # round 1's soft labels arrived


def test_with_no_round_left_the_publication_goes_out_alone_and_is_distilled_once(
    restarted: Restarted,
) -> None:
    stored = base64.b64decode(_stored(restarted.server, 3)["publication"])
    third = _grid(restarted.participants)
    assert _short(restarted.server, third) == {}
    assert [s.message_type for s in third.sent if s.message_type != HELLO] == [
        PUBLICATION,
        PUBLICATION,
    ]
    assert all(s.payload == stored for s in third.of_type(PUBLICATION))
    assert decode_publication(stored, max_bytes=len(stored)).round_id == 3
    records = [_record(p, 3) for p in restarted.participants]
    models = [(p.parent / "state" / "model.pt").read_bytes() for p in restarted.participants]
    assert all(r["distilled"] is True for r in records)

    fourth = _grid(restarted.participants)  # restarted once more: sent again, not distilled again
    _short(restarted.server, fourth)
    assert len(fourth.of_type(PUBLICATION)) == 2
    assert [_record(p, 3) for p in restarted.participants] == records
    assert [
        (p.parent / "state" / "model.pt").read_bytes() for p in restarted.participants
    ] == models


def _copy(restarted: Restarted, root: Path) -> Path:
    """A server.toml over a copy of the ledger (the other tests keep the original)."""
    ledger = root / "ledger.db"
    shutil.copy(restarted.server.parent / "ledger.db", ledger)
    original = f"sqlite:///{restarted.server.parent / 'ledger.db'}"
    server = root / "server.toml"
    server.write_text(restarted.server.read_text().replace(original, f"sqlite:///{ledger}"))
    return server


def _rewrite(server: Path, key: str, change: Any) -> None:
    """Rewrite a stored round through the aggregator's own ledger, so the ledger seal
    records the change (a writer holding the ledger key: only the publication's own
    checks are left to catch it)."""
    node = AggregatorNode.open(load_server_config(server))
    try:
        rounds = RoundStore(node.audit.engine)  # type: ignore[attr-defined]
        state = dict(rounds.load(key).state)
        change(state)
        rounds.save(key, stage="published", state=state, expected_stage="published")
    finally:
        node.audit.engine.dispose()  # type: ignore[attr-defined]


def _flip(state: dict[str, Any]) -> None:
    data = bytearray(base64.b64decode(state["publication"]))
    data[-1] ^= 1
    state["publication"] = base64.b64encode(bytes(data)).decode()


def _forge(state: dict[str, Any]) -> None:
    """Another aggregate, its SM3 written next to it: only the audit log still knows."""
    raw = base64.b64decode(state["publication"])
    real = decode_publication(raw, max_bytes=len(raw))
    aggregate = np.zeros_like(real.aggregate)
    aggregate[:, 0] = 10.0  # every public row labelled class 0
    forged = encode_publication(dataclasses.replace(real, aggregate=aggregate))
    state["publication"] = base64.b64encode(forged).decode()
    state["publication_sm3"] = sm3_digest(forged).hex()


def _garble(state: dict[str, Any]) -> None:
    state["publication"] = "not base64!"


@pytest.mark.parametrize("tamper", [_flip, _forge, _garble])
def test_a_tampered_stored_publication_is_refused_before_anything_is_sent(
    restarted: Restarted, tmp_path: Path, tamper: Any
) -> None:
    server = _copy(restarted, tmp_path)
    # the newest published round: the one a restart sends again
    _rewrite(server, "tryout:00000003", tamper)

    grid = _grid(restarted.participants)
    with pytest.raises(StoredPublicationInvalid) as refused:
        _run(server, grid)
    assert refused.value.code == "DEPLOY_STORED_PUBLICATION_INVALID"
    assert grid.sent == []


def test_a_round_stored_before_publications_were_kept_is_not_sent_again(
    restarted: Restarted, tmp_path: Path
) -> None:
    server = _copy(restarted, tmp_path)
    _rewrite(server, "tryout:00000003", lambda state: state.pop("publication"))

    grid = _grid(restarted.participants)
    assert _short(server, grid) == {}
    assert {s.message_type for s in grid.sent} == {HELLO}


def test_a_stored_round_changed_outside_the_ledger_is_refused_before_anything_is_sent(
    restarted: Restarted, tmp_path: Path
) -> None:
    """A raw write to the database (no ledger key): the ledger seal names the row."""
    from sqlalchemy import create_engine

    server = _copy(restarted, tmp_path)
    raw = RoundStore(create_engine(f"sqlite:///{tmp_path / 'ledger.db'}"))  # not covered
    key = "tryout:00000003"
    state = dict(raw.load(key).state)
    _flip(state)
    raw.save(key, stage="published", state=state, expected_stage="published")

    grid = _grid(restarted.participants)
    with pytest.raises(RowAltered) as refused:
        _run(server, grid)
    assert refused.value.code == "LEDGER_ROW_ALTERED"
    assert 'row ["tryout:00000003"], column state' in str(refused.value)
    assert grid.sent == []
