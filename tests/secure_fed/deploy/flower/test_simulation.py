"""The deployed ServerApp and ClientApp under Flower's simulation runtime (Ray)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from secure_fed.deploy.flower.simulation import run_simulated_federation
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.slow


def _dropped(ledger: Path) -> list[str]:
    engine = create_engine(f"sqlite:///{ledger}")
    with engine.connect() as conn:
        query = text("SELECT entry FROM audit_entries WHERE event = :e")
        rows = conn.execute(query, {"e": "participant.dropped"})
        entries = [bytes(row[0]).decode() for row in rows]
    engine.dispose()
    return entries


def test_a_refusing_node_is_a_dropout_and_the_round_publishes_without_it(tmp_path: Path) -> None:
    ids = [f"{kind}-{k}" for k, kind in enumerate(["hospital", "bank"] * 3)]
    server, participants = write_federation(
        tmp_path,
        ids=ids,
        rounds=1,
        builtin="bank_imbalanced",
        min_participants=3,
        by_partition=True,
        extra="alpha = 5.0\n",
    )
    refusing = participants[4]  # holds a public set of another digest: refuses to train
    toml = refusing.read_text()
    refusing.write_text(re.sub(r'^sm3 = ".*"', f'sm3 = "{"0" * 64}"', toml, flags=re.M))

    run_simulated_federation(server, tmp_path / "nodes", num_supernodes=len(ids), num_cpus=2)

    for k, path in enumerate(participants):
        record_file = path.parent / "state" / "rounds" / "r00000001.json"
        if k == 4:
            assert not record_file.exists()
            continue
        record = json.loads(record_file.read_text())
        assert record["trained"] is True and record["distilled"] is True
    dropped = _dropped(server.parent / "ledger.db")
    assert len(dropped) == 1
    assert ids[4] in dropped[0] and "PUBLIC_SET_MISMATCH" in dropped[0]
