"""Participants on their own tables (CSV and Parquet) with a public set identified by SM3."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.config_errors import ParticipantConfigInvalid
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.server_config import load_server_config
from secure_fed.federation.participant import public_set_digest
from tests.secure_fed.deploy.flower.workspace import write_keys

IDS = ["hospital-a", "bank-b", "hospital-c"]
FEATURES = 6


def _table(rng: np.random.Generator, rows: int) -> pd.DataFrame:
    y = rng.integers(0, 2, size=rows)
    x = rng.normal(size=(rows, FEATURES)) + y[:, None]
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(FEATURES)])
    frame["outcome"] = np.where(y == 1, "sick", "well")
    return frame


def _write(root: Path) -> tuple[Path, list[Path]]:
    rng = np.random.default_rng(7)
    write_keys(root / "keys", IDS)
    public = rng.normal(size=(40, FEATURES)).astype(np.float32)
    np.save(root / "public.npy", public)
    sm3 = public_set_digest(public)
    rows = {pid: 60 + 10 * k for k, pid in enumerate(IDS)}
    entries = "".join(
        f'[[participants]]\nid = "{pid}"\narchitecture = "mlp"\nrows = {rows[pid]}\n\n'
        for pid in IDS
    )
    server = root / "server.toml"
    server.write_text(
        f'[server]\nnamespace = "own"\nledger_url = "sqlite:///{root / "ledger.db"}"\n'
        f'log_signing_key = "keys/aggregator/log-signing-key.pem"\nkey_dir = "keys/aggregator"\n\n'
        f'[federation]\nmode = "plaintext"\nrounds = 1\nmin_participants = 2\nnum_classes = 2\n'
        f"num_public = 40\nepochs_per_round = 1\nbatch_size = 16\n\n"
        f'[public]\nsm3 = "{sm3}"\n\n{entries}'
    )
    tomls = []
    for k, pid in enumerate(IDS):
        folder = root / pid
        folder.mkdir()
        table = _table(rng, rows[pid])
        name = "rows.parquet" if k == 1 else "rows.csv"
        table.to_parquet(folder / name) if k == 1 else table.to_csv(folder / name, index=False)
        toml = folder / "participant.toml"
        toml.write_text(
            f'[participant]\nid = "{pid}"\narchitecture = "mlp"\nstate_dir = "state"\n\n'
            f'[data]\npath = "{name}"\nlabel_column = "outcome"\nclasses = ["well", "sick"]\n\n'
            f'[public]\npath = "{root / "public.npy"}"\nsm3 = "{sm3}"\n\n'
            f"[dp]\nepsilon = 8.0\ndelta = 1e-5\nrounds = 1\n\n"
            f'[keys]\ndir = "{root / "keys" / "participants" / pid}"\n\n'
            f'[budget]\nledger_url = "sqlite:///{folder / "own.db"}"\n'
        )
        tomls.append(toml)
    return server, tomls


def test_participants_on_their_own_tables_complete_a_round(tmp_path: Path) -> None:
    server, tomls = _write(tmp_path)
    aggregator = AggregatorNode.open(load_server_config(server))
    assert aggregator.shape == (40, 2)
    config = aggregator.handler.open_round(aggregator.round_config(1))
    nodes = [
        ParticipantNode.open(load_participant_config(t), settings=aggregator.settings, index=k)
        for k, t in enumerate(tomls)
    ]
    assert [n.handler.participant.num_samples for n in nodes] == [60, 70, 80]
    for node in nodes:
        aggregator.handler.handle_upload(node.handle_round(config), round_id=1)
    publication = aggregator.handler.finish_round(1)
    assert all(n.handle_publication(publication)["distilled"] for n in nodes)


def test_a_label_outside_the_declared_classes_is_refused(tmp_path: Path) -> None:
    server, tomls = _write(tmp_path)
    table = pd.read_csv(tomls[0].parent / "rows.csv")
    table.loc[0, "outcome"] = "unknown"
    table.to_csv(tomls[0].parent / "rows.csv", index=False)
    aggregator = AggregatorNode.open(load_server_config(server))
    with pytest.raises(ParticipantConfigInvalid, match="not in data.classes") as info:
        ParticipantNode.open(
            load_participant_config(tomls[0]), settings=aggregator.settings, index=0
        )
    assert info.value.field == "data.classes"
