"""A ``deploy local`` run gives every participant what it needs to post upload notices.

Each participant gets a client certificate of the run's CA in its own name and a
``[notice]`` table naming the gatekeeper that opens its mode's values (the key
authority in ckks mode, the helper in shares mode), so the ServerApp cannot
leave a noticed upload out of a roster (``secure_fed.secure.upload_notices``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from secure_fed.deploy.local import LocalFederation
from secure_fed.deploy.local_files import LocalOptions
from secure_fed.deploy.participant_config import load_participant_config


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_every_participant_notices_the_gatekeeper_of_its_mode(tmp_path: Path, mode: str) -> None:
    options = LocalOptions(participants=3, mode=mode, rounds=1, run_dir=tmp_path / "run")
    layout = LocalFederation(options=options, python=sys.executable, env={}).prepare()
    port = layout.authority_port if mode == "ckks" else layout.helper_port
    for pid, toml in layout.participant_tomls.items():
        config = load_participant_config(toml)
        assert config.notice_url == f"https://127.0.0.1:{port}"
        assert config.notice_ca == layout.ca_file
        assert config.notice_cert is not None and config.notice_key is not None
        cert = x509.load_pem_x509_certificate(config.notice_cert.read_bytes())
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == pid
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.CLIENT_AUTH in usage
        assert config.notice_key.stat().st_mode & 0o077 == 0  # the node's key is private
