"""The deployed ServerApp and ClientApp under Flower's simulation runtime (Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from secure_fed.deploy.flower.simulation import run_simulated_federation
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.slow


def test_simulated_federation_publishes_and_every_virtual_node_distills(tmp_path: Path) -> None:
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
    run_simulated_federation(server, tmp_path / "nodes", num_supernodes=len(ids), num_cpus=2)
    for toml in participants:
        record = json.loads((toml.parent / "state" / "rounds" / "r00000001.json").read_text())
        assert record["trained"] is True and record["distilled"] is True
