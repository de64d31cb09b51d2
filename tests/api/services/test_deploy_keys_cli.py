"""``secure-fed deploy keys``: the key ceremony from the command line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from api.cli import app
from secure_fed.deploy.keys import read_manifest


def _keys(out: Path, *extra: str) -> tuple[int, str]:
    args = ["deploy", "keys", "--mode", "shares", "--participants", "h1, h2,b1"]
    result = CliRunner().invoke(app, [*args, "--shape", "64,4", "--out", str(out), *extra])
    return result.exit_code, result.output


def test_deploy_keys_writes_every_party_and_never_overwrites(tmp_path: Path) -> None:
    code, output = _keys(tmp_path / "keys", "--min-participants", "3")
    assert code == 0, output
    manifest = read_manifest(tmp_path / "keys" / "helper", role="helper")
    assert manifest.participant_ids == ("h1", "h2", "b1") and manifest.min_participants == 3
    assert {p.name for p in (tmp_path / "keys").iterdir()} == {
        "aggregator",
        "keyauthority",
        "helper",
        "participants",
        "api",
        "tls",
        "superlink",
    }
    code, output = _keys(tmp_path / "keys")
    assert code == 1 and "DEPLOY_KEY_DIRECTORY_INVALID" in output


def test_deploy_keys_names_a_bad_option(tmp_path: Path) -> None:
    code, output = _keys(tmp_path / "k", "--shape", "64")
    assert code == 2 and "--shape must be N,C" in output
    code, output = _keys(tmp_path / "k2", "--min-participants", "1")
    assert code != 0 and "min_participants must be >= 2" in output
