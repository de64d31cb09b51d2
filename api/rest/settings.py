"""The REST service's typed settings: environment variables, then an optional TOML file.

One :class:`ApiSettings` object configures ``secure-fed api`` (pydantic-settings;
environment variables prefixed ``SECURE_FED_``, shared with :mod:`api.settings`,
take precedence over the TOML file given with ``--config``). Production refuses
a default or short session secret, a missing TLS certificate and key, and an
SQLite ledger, unless ``api_insecure_dev`` is set explicitly (OWASP ASVS 4.0
V14.1: secure configuration by default).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from api.settings import DEFAULT_WORKDIR

__all__ = ["ApiSettings", "DEFAULT_SESSION_SECRETS", "MIN_SECRET_CHARS"]

#: Values a session secret must never have outside development.
DEFAULT_SESSION_SECRETS = frozenset({"", "change-me", "changeme", "secret", "development"})
#: Shortest accepted session secret in production.
MIN_SECRET_CHARS = 32


class ApiSettings(BaseSettings):
    """Settings of the REST service (``secure-fed api``).

    Attributes
    ----------
    environment
        ``development`` (default) or ``production``.
    workdir
        Work directory; the default ledger is ``<workdir>/demo/ledger.db``
        (what ``secure-fed demo`` leaves) and the default audit key
        ``<workdir>/demo/log-signing-key.pem``.
    database_url
        SQLAlchemy URL of the ledger (PostgreSQL in production).
    key_passphrase
        Passphrase of encrypted private keys (``SECURE_FED_KEY_PASSPHRASE``).
    api_host, api_port, api_workers
        Where uvicorn listens and how many worker processes it starts.
    api_tls_certfile, api_tls_keyfile
        PEM certificate and key for HTTPS (required in production).
    api_insecure_dev
        Explicitly allow production without TLS, with SQLite or a default secret.
    api_session_secret
        Key of the console's session cookies (>= 32 characters in production);
        ``None`` in development: a random key per start.
    api_audit_key_file
        SM2 key signing the audit log's tree heads; the service writes every
        denial to the log, so it needs it.
    api_audit_origin
        Log origin used when the log is still empty.
    api_report_key_file
        SM2 key signing exported JSON report bundles; default: the demo's
        ``<workdir>/demo/report-signing-key.pem`` when serving the demo's ledger
        (no ``database_url``) and the file exists, else none (JSON export refused).
    api_receipt_key_file
        The ledger's receipt key (``privacy_ledger.budget.receipts``); default: the
        demo's ``<workdir>/demo/receipt-key.pem`` likewise, else none (no receipts).
    api_log_public_key_file
        The log's public key obtained out of band, pinned by report exports.
    api_party_logs_dir
        Deployment folder holding the key authority's (and, in shares mode, the
        helper's) own audit logs and keys (``compliance.parties``): the console
        and report exports read and verify them. Default: the ``secure-fed deploy
        local`` folder the ledger's SQLite file or the audit key lies in, if any.
    api_party_logs_off
        Read no party log, even from a deployment folder found by default.
    api_max_body_bytes
        Largest accepted request body (HTTP 413 beyond).
    api_session_seconds
        Lifetime of a console session cookie.
    """

    model_config = SettingsConfigDict(env_prefix="SECURE_FED_", extra="ignore")

    environment: str = Field(default="development", pattern="^(development|production)$")
    workdir: Path = DEFAULT_WORKDIR
    database_url: str | None = None
    key_passphrase: SecretStr | None = None
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)
    api_workers: int = Field(default=1, ge=1, le=64)
    api_tls_certfile: Path | None = None
    api_tls_keyfile: Path | None = None
    api_insecure_dev: bool = False
    api_session_secret: SecretStr | None = None
    api_audit_key_file: Path | None = None
    api_audit_origin: str = "secure-fed/api"
    api_report_key_file: Path | None = None
    api_receipt_key_file: Path | None = None
    api_log_public_key_file: Path | None = None
    api_party_logs_dir: Path | None = None
    api_party_logs_off: bool = False
    api_max_body_bytes: int = Field(default=1 << 20, ge=1024, le=1 << 30)
    api_session_seconds: int = Field(default=8 * 3600, ge=60, le=7 * 86400)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Order the sources: arguments, environment, then the TOML file (if any)."""
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    @classmethod
    def load(cls, config: Path | None = None, **overrides: Any) -> ApiSettings:
        """Build the settings from the environment and the TOML file ``config``.

        Raises
        ------
        pydantic.ValidationError
            Naming the first invalid field (also for a production setting refused).
        """
        if config is None:
            return cls(**overrides)

        class _FromFile(cls):  # type: ignore[valid-type,misc]
            model_config = SettingsConfigDict(**{**cls.model_config, "toml_file": config})

        loaded = _FromFile(**overrides)
        return cls.model_validate(loaded.model_dump())

    @model_validator(mode="after")
    def _production_is_strict(self) -> ApiSettings:
        if self.environment != "production" or self.api_insecure_dev:
            return self
        secret = self.api_session_secret
        value = "" if secret is None else secret.get_secret_value()
        if value.lower() in DEFAULT_SESSION_SECRETS or len(value) < MIN_SECRET_CHARS:
            raise ValueError(
                f"api_session_secret: production needs a random secret of {MIN_SECRET_CHARS}+ "
                "characters, not a default"
            )
        if self.api_tls_certfile is None or self.api_tls_keyfile is None:
            raise ValueError(
                "api_tls_certfile: production needs a TLS certificate and key "
                "(or api_insecure_dev = true)"
            )
        if not self.database_url or self.database_url.startswith("sqlite"):
            raise ValueError("database_url: production needs a PostgreSQL URL, not SQLite")
        return self

    @property
    def secure_cookies(self) -> bool:
        """Whether session cookies carry ``Secure`` (everywhere but development)."""
        return self.environment == "production"

    def resolved_database_url(self) -> str:
        """Return the ledger URL, defaulting to the demo's ``<workdir>/demo/ledger.db``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.workdir / 'demo' / 'ledger.db').as_posix()}"

    def resolved_audit_key_file(self) -> Path:
        """Return the audit signing key path, defaulting to the demo's key."""
        if self.api_audit_key_file is not None:
            return self.api_audit_key_file
        return self.workdir / "demo" / "log-signing-key.pem"

    def _demo_key(self, configured: Path | None, name: str) -> Path | None:
        if configured is not None:
            return configured
        if self.database_url:
            return None  # another ledger than the demo's: its keys are configured, or absent
        path = self.workdir / "demo" / name
        return path if path.is_file() else None

    def resolved_report_key_file(self) -> Path | None:
        """Return the report signing key path: configured, else the demo's if present."""
        return self._demo_key(self.api_report_key_file, "report-signing-key.pem")

    def resolved_receipt_key_file(self) -> Path | None:
        """Return the receipt key path: configured, else the demo's if present."""
        return self._demo_key(self.api_receipt_key_file, "receipt-key.pem")

    def resolved_party_logs_dir(self) -> tuple[Path | None, str]:
        """Return the folder of the party audit logs and where that setting came from."""
        from compliance.parties import discover_run_folder

        if self.api_party_logs_off:
            return None, "none (api_party_logs_off)"
        if self.api_party_logs_dir is not None:
            return self.api_party_logs_dir, f"api_party_logs_dir {self.api_party_logs_dir}"
        found = discover_run_folder(
            database_url=self.resolved_database_url(), audit_key=self.resolved_audit_key_file()
        )
        if found is None:
            return None, "none found (set api_party_logs_dir)"
        return found, f"the deployment folder of the ledger, {found}"

    def session_key(self) -> bytes:
        """Return the session-cookie key (a random one when none is configured)."""
        if self.api_session_secret is None:
            return secrets.token_bytes(32)
        return self.api_session_secret.get_secret_value().encode("utf-8")
