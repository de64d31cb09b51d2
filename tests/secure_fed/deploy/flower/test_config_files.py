"""participant.toml and server.toml: every bad field is refused with a typed error naming it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from secure_fed.deploy.config_errors import (
    ParticipantConfigInvalid,
    PublicSetMismatch,
    ServerConfigInvalid,
)
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.server_config import config_from_settings, load_server_config, settings_of
from secure_fed.federation.participant import public_set_digest
from tests.secure_fed.deploy.flower.workspace import write_federation

IDS = ["hospital-1", "bank-2", "hospital-3"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    return write_federation(tmp_path_factory.mktemp("fed"), ids=IDS, evidence_rows=0)


def _edit(path: Path, tmp_path: Path, old: str, new: str) -> Path:
    text = path.read_text()
    assert re.search(old, text, flags=re.M), old
    out = tmp_path / path.name
    out.write_text(re.sub(old, new, text, count=1, flags=re.M))
    return out


def test_the_written_files_load(files: tuple[Path, list[Path]]) -> None:
    server, participants = files
    config = load_server_config(server)
    assert config.federation.participant_ids == tuple(IDS)
    assert config.federation.rounds == 2 and config.federation.mode == "plaintext"
    node = load_participant_config(participants[1])
    assert node.participant_id == "bank-2" and node.architecture == "logreg"
    assert node.state_dir == participants[1].parent / "state"
    assert config_from_settings(settings_of(config.federation)) == config.federation


PARTICIPANT_FIELDS = [
    (r'^id = "hospital-1"', 'id = "no spaces allowed"', "participant.id"),
    (r'^architecture = "mlp"', 'architecture = "resnet-1000"', "participant.architecture"),
    (r'^builtin = "digits"', 'builtin = "imagenet"', "data.builtin"),
    (r"^epsilon = 8.0", "epsilon = -1.0", "dp.epsilon"),
    (r"^delta = .*", "delta = 2.0", "dp.delta"),
    (r"^rounds = 2", "rounds = 0", "dp.rounds"),
    (r"^sm3 = .*", 'sm3 = "not-hex"', "public.sm3"),
    (r'^dir = ".*"', 'dir = "/nonexistent/keys"', "keys.dir"),
    (r"^ledger_url = .*", "", "budget"),
    (r"^\[data\]\nbuiltin = .*", '[data]\npath = "rows.csv"\nbuiltin = "digits"', "data.path"),
]


@pytest.mark.parametrize(("old", "new", "field"), PARTICIPANT_FIELDS)
def test_each_bad_participant_field_is_named(
    files: tuple[Path, list[Path]], tmp_path: Path, old: str, new: str, field: str
) -> None:
    bad = _edit(files[1][0], tmp_path, old, new)
    with pytest.raises(ParticipantConfigInvalid) as info:
        load_participant_config(bad)
    assert info.value.field == field
    assert field in info.value.message and str(bad) in info.value.message


def test_an_unreadable_participant_file_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / "participant.toml").write_text("[participant\nid = ")
    with pytest.raises(ParticipantConfigInvalid, match="cannot read"):
        load_participant_config(tmp_path / "participant.toml")
    with pytest.raises(ParticipantConfigInvalid, match="cannot read"):
        load_participant_config(tmp_path / "missing.toml")


def test_a_public_set_of_another_digest_is_refused_before_use(
    files: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    public = np.zeros((5, 3), dtype=np.float32)
    np.save(tmp_path / "public.npy", public)
    good = public_set_digest(public)
    config = _edit(files[1][0], tmp_path, r"^builtin = true", 'path = "public.npy"')
    config = _edit(config, tmp_path, r"^sm3 = .*", f'sm3 = "{good}"')
    assert load_participant_config(config).load_public(None).shape == (5, 3)
    np.save(tmp_path / "public.npy", public + 1)
    with pytest.raises(PublicSetMismatch) as info:
        load_participant_config(config).load_public(None)
    assert info.value.field == "public.sm3"


SERVER_FIELDS = [
    (r'^namespace = "tryout"', 'namespace = "a b"', "server.namespace"),
    (r'^mode = "plaintext"', 'mode = "rot13"', "federation.mode"),
    (r"^rounds = 2", "rounds = 0", "federation.rounds"),
    (r"^min_participants = 2", "min_participants = 9", "federation.min_participants"),
    (r"^epochs_per_round = 1", 'epochs_per_round = "one"', "federation.epochs_per_round"),
    (r"^reply_timeout = .*", "reply_timeout = -5", "server.reply_timeout"),
    (r'^architecture = "mlp"', 'architecture = "resnet"', "participants[0].architecture"),
    (r'^id = "bank-2"', 'id = "hospital-1"', "participants"),
    (r"^sm3 = .*", "sm3 = 12", "public.sm3"),
    (r'^builtin = "digits"', 'builtin = "imagenet"', "federation.builtin"),
]


@pytest.mark.parametrize(("old", "new", "field"), SERVER_FIELDS)
def test_each_bad_server_field_is_named(
    files: tuple[Path, list[Path]], tmp_path: Path, old: str, new: str, field: str
) -> None:
    bad = _edit(files[0], tmp_path, old, new)
    with pytest.raises(ServerConfigInvalid) as info:
        load_server_config(bad)
    assert info.value.field == field


def test_a_federation_setting_out_of_range_is_a_server_config_error(
    files: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    bad = _edit(files[0], tmp_path, r"^batch_size = 64", "batch_size = 0")
    with pytest.raises(ServerConfigInvalid, match="batch_size") as info:
        load_server_config(bad)
    assert info.value.field == "federation"
