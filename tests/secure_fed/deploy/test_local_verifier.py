"""A ckks ``deploy local`` run names its verifier everywhere: keys, server.toml, the aggregator.

The key ceremony makes the verifier's key and the key authority's manifest pins it, the
run starts ``secure-fed verifier serve`` after the key authority, ``server.toml`` names
the service and the ServerApp's aggregator forwards uploads to it and attests every
request; a ``server.toml`` without ``[parties] verifier_url`` is refused by name, since
the pinned key authority would decrypt nothing. ``LocalOptions(verifier=False)`` is a
run without any of it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from secure_fed.deploy.aggregator_node import AggregatorNode
from secure_fed.deploy.config_errors import ServerConfigInvalid
from secure_fed.deploy.keys import read_manifest
from secure_fed.deploy.local import LocalFederation
from secure_fed.deploy.local_files import LocalOptions
from secure_fed.deploy.server_config import load_server_config
from secure_fed.secure.modes.ckks import CkksAggregator


def _federation(tmp_path: Path, **kw: object) -> LocalFederation:
    options = LocalOptions(participants=2, mode="ckks", rounds=1, run_dir=tmp_path / "run", **kw)  # type: ignore[arg-type]
    return LocalFederation(options=options, python=sys.executable, env={})


def test_a_ckks_run_starts_the_verifier_and_its_aggregator_attests(tmp_path: Path) -> None:
    fed = _federation(tmp_path)
    layout = fed.prepare()
    names = [spec.name for spec in fed.services()]
    assert names[:2] == ["keyauthority", "verifier"], names
    verifier = next(spec for spec in fed.services() if spec.name == "verifier")
    assert verifier.argv[verifier.argv.index("--keys") + 1] == str(layout.keys / "verifier")
    pinned = read_manifest(layout.keys / "keyauthority").verifier_key
    assert pinned is not None and pinned == read_manifest(layout.keys / "verifier").verifier_key
    toml = layout.server_toml.read_text()
    assert f'verifier_url = "https://127.0.0.1:{layout.verifier_port}"' in toml
    node = AggregatorNode.open(load_server_config(layout.server_toml))
    aggregator = node.engine.aggregator
    assert isinstance(aggregator, CkksAggregator)
    assert aggregator.keys.attest is not None and aggregator.keys.forward is not None
    # without the verifier's address the ServerApp does not start (nothing would decrypt)
    layout.server_toml.write_text(re.sub(r"verifier_url = .*\n", "", toml))
    with pytest.raises(ServerConfigInvalid, match="parties.verifier_url"):
        AggregatorNode.open(load_server_config(layout.server_toml))


def test_a_ckks_run_without_the_verifier_has_none_of_it(tmp_path: Path) -> None:
    fed = _federation(tmp_path, verifier=False)
    layout = fed.prepare()
    assert "verifier" not in [spec.name for spec in fed.services()]
    assert read_manifest(layout.keys / "keyauthority").verifier_key is None
    assert not (layout.keys / "verifier").exists()
    assert "verifier_url" not in layout.server_toml.read_text()
