"""A federation of real processes: SuperLink, three SuperNodes, ``flwr run`` of our app."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.secure_fed.deploy.flower.processes import Processes, wait_for
from tests.secure_fed.deploy.flower.workspace import write_federation

IDS = ["hospital-1", "bank-2", "hospital-3"]

pytestmark = pytest.mark.slow


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop()


def _record(tmp_path: Path, pid: str, round_id: int) -> dict[str, Any]:
    path = tmp_path / "nodes" / pid / "state" / "rounds" / f"r{round_id:08d}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _stages(tmp_path: Path) -> dict[str, str]:
    engine = create_engine(f"sqlite:///{tmp_path / 'server' / 'ledger.db'}")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, stage FROM rounds")).all()
    engine.dispose()
    return {str(r[0]): str(r[1]) for r in rows}


def test_two_plaintext_rounds_over_superlink_and_three_supernodes(
    tmp_path: Path, processes: Processes
) -> None:
    server, participants = write_federation(tmp_path, ids=IDS, rounds=2)
    processes.superlink()
    for pid, toml in zip(IDS, participants, strict=True):
        processes.supernode(pid, toml)
    out = processes.flwr_run(server)
    assert "Successfully started run" in out

    def distilled_everywhere() -> bool:
        return all(_record(tmp_path, pid, 2).get("distilled") for pid in IDS)

    try:
        wait_for(distilled_everywhere, timeout=900, what="round 2's distillation on every node")
    except TimeoutError:
        pytest.fail(processes.logs())
    assert _stages(tmp_path) == {"tryout:00000001": "published", "tryout:00000002": "published"}
    for pid in IDS:
        for rid in (1, 2):
            record = _record(tmp_path, pid, rid)
            assert record["trained"] is True
            committed = [r for r in record["resolved"] if r["state"] == "committed"]
            assert len(committed) == len(record["reservations"]) >= 1
            assert len(record["envelope_sm3"]) == 64
            # round 1's publication came with round 2's message, round 2's on its own
            assert record["distilled"] is True
        assert (tmp_path / "nodes" / pid / "state" / "model.pt").exists()
