"""``participant.toml``'s ``[notice]``: the gatekeeper's URL and TLS files, all or none, checked.

The node sends its signed upload notice there before each upload
(:func:`secure_fed.deploy.participant_node.post_notice`; over HTTPS against the real
helper service in ``tests/api/services/test_upload_notice_services.py``). A plaintext
federation has no gatekeeper: a ``[notice]`` there is refused when the node opens.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from secure_fed.deploy.config_errors import ParticipantConfigInvalid
from secure_fed.deploy.participant_config import load_participant_config
from secure_fed.deploy.participant_node import ParticipantNode
from secure_fed.deploy.server_config import load_server_config, settings_of
from tests.secure_fed.deploy.flower.workspace import write_federation

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

IDS = ["hospital-1", "bank-2"]


def _with_notice(toml: Path, body: str) -> None:
    for name in ("ca.pem", "me.pem", "me.key"):
        (toml.parent / name).write_text("-", encoding="utf-8")
    with toml.open("a", encoding="utf-8") as handle:
        handle.write(f"\n[notice]\n{body}\n")


GOOD = "\n".join(
    [
        'url = "https://127.0.0.1:8444/"',
        'ca_file = "ca.pem"',
        'cert_file = "me.pem"',
        'key_file = "me.key"',
    ]
)


def test_a_notice_table_is_read(tmp_path: Path) -> None:
    _, participants = write_federation(tmp_path, ids=IDS, evidence_rows=0)
    before = load_participant_config(participants[0])
    assert before.notice_url == "" and before.notice_ca is None  # no table: no notices
    _with_notice(participants[0], GOOD)
    config = load_participant_config(participants[0])
    assert config.notice_url == "https://127.0.0.1:8444"
    assert config.notice_ca == participants[0].parent / "ca.pem"
    assert config.notice_cert is not None and config.notice_key is not None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (GOOD.replace("https://", "http://"), "notice.url"),
        (GOOD.replace('cert_file = "me.pem"', 'cert_file = "absent.pem"'), "notice.cert_file"),
        (GOOD.replace('key_file = "me.key"', ""), "notice.key_file"),
    ],
)
def test_a_bad_notice_table_is_refused_naming_the_field(
    tmp_path: Path, body: str, field: str
) -> None:
    _, participants = write_federation(tmp_path, ids=IDS, evidence_rows=0)
    _with_notice(participants[0], body)
    with pytest.raises(ParticipantConfigInvalid) as caught:
        load_participant_config(participants[0])
    assert caught.value.field == field


def test_a_plaintext_federation_has_no_gatekeeper_to_notice(tmp_path: Path) -> None:
    server, participants = write_federation(tmp_path, ids=IDS, evidence_rows=0)
    _with_notice(participants[0], GOOD)
    settings = settings_of(load_server_config(server).federation)
    with pytest.raises(ParticipantConfigInvalid) as caught:
        ParticipantNode.open(load_participant_config(participants[0]), settings=settings, index=0)
    assert caught.value.field == "notice.url"
