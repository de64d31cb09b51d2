"""The pre-launch checklist against a real ledger, real key files and real certificates."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from compliance.checklist import ChecklistResult, load_config, run_checklist
from compliance.errors import ChecklistConfigInvalid
from compliance.view import NOT_CRYPTOGRAPHIC, SECURE_MODE_OFF
from crypto.sm import SM2PrivateKey
from privacy_ledger import create_ledger_engine
from tests.compliance.builder import Built, build_ledger


def certificate(folder: Path, *, days: int) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aggregator.test")])
    now = datetime.now(tz=UTC)
    start, end = (
        (now - timedelta(days=1), now + timedelta(days=days))
        if days > 0
        else (now - timedelta(days=30), now - timedelta(days=1))
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "server.crt", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


@dataclass
class Site:
    """A deployment folder with a ledger, keys, a certificate and a config writer."""

    folder: Path
    built: Built

    def write(self, extra: str = "", **replace: str) -> Path:
        cert, key = certificate(self.folder, days=int(replace.pop("cert_days", "90")))
        tables = {
            "log": 'public_key = "log-pub.pem"\nsigning_host = "signer.internal"',
            "keys": 'private_keys = ["keys/participant.pem"]',
            "tls": f'certificate = "{cert.name}"\nprivate_key = "{key.name}"',
            "roles": 'aggregator_host = "agg.internal"\nkey_authority_host = "ka.internal"',
            "filter": "enabled = true",
            "backups": 'schedule = "daily 02:00"\nlocation = "s3://ledger-backups"',
        }
        tables.update(replace)
        text = extra + "\n" + "\n".join(f"[{k}]\n{v}" for k, v in tables.items() if v)
        path = self.folder / "checklist.toml"
        path.write_text(text, encoding="utf-8")
        return path

    def run(self, config: Path | None) -> ChecklistResult:
        engine = create_ledger_engine(self.built.url)
        try:
            return run_checklist(load_config(config), engine)
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    folder = tmp_path_factory.mktemp("site")
    (folder / "db").mkdir()
    built = build_ledger(f"sqlite:///{folder / 'db' / 'ledger.db'}", rounds=1, every_key=True)
    (folder / "log-pub.pem").write_bytes(built.log_key.public_key.to_pem())
    keys = folder / "keys"
    keys.mkdir()
    (keys / "participant.pem").write_bytes(
        SM2PrivateKey.generate().to_pem(passphrase=b"s3cret-pass")
    )
    (keys / "participant.pem").chmod(0o600)
    return Site(folder=folder, built=built)


def status(result: ChecklistResult) -> dict[str, str]:
    return {e.id: e.status for e in result.entries}


def test_a_complete_deployment_passes(site: Site) -> None:
    result = site.run(site.write())
    got = status(result)
    assert result.ok, [e for e in result.entries if e.status == "fail" and e.required]
    for item in (
        "ledger.verifies",
        "ledger.log_key_pinned",
        "budgets.every_participant",
        "keys.participants_registered",
        "keys.encrypted_at_rest",
        "log.signing_key_not_on_database_host",
        "tls.configured",
        "roles.key_authority_separate",
        "filter.enabled",
        "backups.configured",
    ):
        assert got[item] == "pass", (item, next(e.reason for e in result.entries if e.id == item))
    assert got["dp.secure_rng"] == "fail"  # recorded secure_rng false; advisory by default
    assert all(got[i] == "manual" for i in got if i.startswith("evidence."))


@pytest.mark.parametrize(
    ("change", "item"),
    [
        (
            {"roles": 'aggregator_host = "one"\nkey_authority_host = "one"'},
            "roles.key_authority_separate",
        ),
        ({"filter": "enabled = false"}, "filter.enabled"),
        ({"backups": ""}, "backups.configured"),
        ({"tls": ""}, "tls.configured"),
        ({"cert_days": "-1"}, "tls.configured"),
        ({"log": 'public_key = "other-pub.pem"'}, "ledger.verifies"),
        ({"keys": 'private_keys = ["keys/plain.pem"]'}, "keys.encrypted_at_rest"),
        ({"keys": 'private_keys = ["keys/open.pem"]'}, "keys.encrypted_at_rest"),
        ({"log": 'signing_host = "localhost"'}, "log.signing_key_not_on_database_host"),
    ],
)
def test_each_failure_blocks_launch(site: Site, change: dict[str, str], item: str) -> None:
    (site.folder / "other-pub.pem").write_bytes(SM2PrivateKey.generate().public_key.to_pem())
    plain = site.folder / "keys" / "plain.pem"
    plain.write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
    plain.chmod(0o600)
    wide = site.folder / "keys" / "open.pem"
    wide.write_bytes(SM2PrivateKey.generate().to_pem(passphrase=b"s3cret-pass"))
    wide.chmod(0o644)
    result = site.run(site.write(**change))
    entry = next(e for e in result.entries if e.id == item)
    assert entry.status == "fail" and entry.required, entry
    assert not result.ok


def test_production_and_secure_rng_make_items_required(site: Site) -> None:
    result = site.run(site.write('environment = "production"', dp="require_secure_rng = true"))
    failing = {e.id for e in result.entries if e.required and e.status == "fail"}
    assert failing == {"database.production_backend", "dp.secure_rng"}


def test_without_config_items_say_what_to_do(site: Site) -> None:
    result = site.run(None)
    got = {e.id: e for e in result.entries}
    assert got["tls.configured"].status == "fail" and "[tls]" in got["tls.configured"].reason
    assert got["roles.key_authority_separate"].status == "manual"
    assert "key_authority_host" in got["roles.key_authority_separate"].reason
    assert got["ledger.verifies"].status == "pass"


def test_a_private_key_beside_the_database_fails(site: Site) -> None:
    stray = site.folder / "db" / "log-signing-key.pem"
    stray.write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
    try:
        entry = next(
            e
            for e in site.run(site.write()).entries
            if e.id == "log.signing_key_not_on_database_host"
        )
    finally:
        stray.unlink()
    assert entry.status == "fail" and "log-signing-key.pem" in entry.reason


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[tsl]\ncertificate = 'x'", "tsl: unknown table"),
        ("[tls]\ncert = 'x'", "tls.cert: unknown key"),
        ("[filter]\nenabled = 'yes'", "filter.enabled: has the wrong type"),
        ("[keys]\nprivate_keys = [1]", "keys.private_keys: has the wrong type"),
        ("environment = 'staging'", "environment"),
        ("[tls", "not TOML"),
    ],
)
def test_bad_config_is_refused(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ChecklistConfigInvalid, match=fragment.replace("[", r"\[")):
        load_config(path)


def test_command_exit_codes_and_json(site: Site) -> None:
    env = {**os.environ, "SECURE_FED_ENVIRONMENT": "development"}
    db = ["--db", site.built.url]
    good = subprocess.run(
        ["secure-fed", "audit", "checklist", "--config", str(site.write()), *db, "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["ok"] is True
    bad = subprocess.run(
        ["secure-fed", "audit", "checklist", *db],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 1
    assert "FAIL   tls.configured (required)" in bad.stdout


def test_secure_rng_item_says_what_it_checks_in_the_reports_words(site: Site) -> None:
    """Recorded secure_rng false: the item names the check, the reason uses the reports' words."""
    result = site.run(site.write())
    entry = next(e for e in result.entries if e.id == "dp.secure_rng")
    assert "cryptographic RNG" in entry.title and "secure_mode on" in entry.title
    assert entry.status == "fail" and "secure RNG" not in entry.reason
    assert f"{NOT_CRYPTOGRAPHIC} (secure_rng false: {SECURE_MODE_OFF})" in entry.reason
