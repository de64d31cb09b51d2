"""Settings: production refuses default secrets, missing TLS and SQLite unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from api.rest import ApiSettings
from api.rest.context import build_context
from api.rest.errors import ServiceMisconfigured
from crypto.sm import SM2PrivateKey

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
GOOD = {
    "environment": "production",
    "database_url": PG,
    "api_session_secret": "x" * 40,
    "api_tls_certfile": "cert.pem",
    "api_tls_keyfile": "key.pem",
}


def test_production_with_everything_set_is_accepted() -> None:
    settings = ApiSettings(**GOOD)  # type: ignore[arg-type]
    assert settings.secure_cookies


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"api_session_secret": None}, "api_session_secret"),
        ({"api_session_secret": "change-me"}, "api_session_secret"),
        ({"api_session_secret": "short"}, "api_session_secret"),
        ({"api_tls_certfile": None}, "api_tls_certfile"),
        ({"api_tls_keyfile": None}, "api_tls_certfile"),
        ({"database_url": "sqlite:///ledger.db"}, "database_url"),
        ({"database_url": None}, "database_url"),
    ],
)
def test_production_refuses_defaults(change: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ApiSettings(**{**GOOD, **change})  # type: ignore[arg-type]


def test_the_insecure_development_flag_must_be_explicit() -> None:
    loose = {"environment": "production", "api_insecure_dev": True}
    assert not ApiSettings(**loose).api_tls_certfile  # type: ignore[arg-type]


def test_toml_file_then_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "api.toml"
    config.write_text('api_port = 9100\napi_workers = 3\ndatabase_url = "sqlite:///x.db"\n')
    monkeypatch.setenv("SECURE_FED_API_WORKERS", "2")
    settings = ApiSettings.load(config)
    assert (settings.api_port, settings.api_workers) == (9100, 2)
    assert settings.resolved_database_url() == "sqlite:///x.db"
    config.write_text('environment = "production"\n')
    with pytest.raises(ValidationError, match="api_session_secret"):
        ApiSettings.load(config)


def test_defaults_point_at_the_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SECURE_FED_DATABASE_URL", raising=False)
    settings = ApiSettings()
    assert settings.resolved_database_url() == "sqlite:///secure-fed-work/demo/ledger.db"
    assert settings.resolved_audit_key_file() == Path("secure-fed-work/demo/log-signing-key.pem")


def test_report_and_receipt_keys_default_to_the_demo_s_when_present(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SECURE_FED_DATABASE_URL", raising=False)
    settings = ApiSettings(workdir=tmp_path)
    assert settings.resolved_report_key_file() is None  # no demo run: no key, 503 as before
    assert settings.resolved_receipt_key_file() is None
    (tmp_path / "demo").mkdir()
    for name in ("report-signing-key.pem", "receipt-key.pem"):
        (tmp_path / "demo" / name).write_bytes(b"")
    assert settings.resolved_report_key_file() == tmp_path / "demo" / "report-signing-key.pem"
    assert settings.resolved_receipt_key_file() == tmp_path / "demo" / "receipt-key.pem"
    other = ApiSettings(workdir=tmp_path, database_url="sqlite:///other.db")
    assert other.resolved_report_key_file() is other.resolved_receipt_key_file() is None
    chosen = ApiSettings(workdir=tmp_path, api_report_key_file=tmp_path / "mine.pem")
    assert chosen.resolved_report_key_file() == tmp_path / "mine.pem"


def test_keys_that_cannot_be_loaded_stop_the_service(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with pytest.raises(ServiceMisconfigured, match="audit signing key"):
        build_context(ApiSettings(database_url=url, api_audit_key_file=tmp_path / "none.pem"))
    encrypted = tmp_path / "enc.pem"
    encrypted.write_bytes(SM2PrivateKey.generate().to_pem(passphrase=b"correct horse battery"))
    with pytest.raises(ServiceMisconfigured, match="SECURE_FED_KEY_PASSPHRASE"):
        build_context(
            ApiSettings(database_url=url, api_audit_key_file=encrypted, key_passphrase=None)
        )
    with pytest.raises(ServiceMisconfigured, match="enc.pem"):
        build_context(
            ApiSettings(
                database_url=url,
                api_audit_key_file=encrypted,
                key_passphrase="wrong passphrase",  # type: ignore[arg-type]
            )
        )
    plain = tmp_path / "plain.pem"
    plain.write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
    production = {**GOOD, "database_url": url, "api_insecure_dev": False}
    with pytest.raises(ValidationError):
        ApiSettings(**production)  # type: ignore[arg-type]
    production = {**GOOD, "api_audit_key_file": plain}
    with pytest.raises(ServiceMisconfigured, match="unencrypted"):
        build_context(ApiSettings(**production))  # type: ignore[arg-type]
