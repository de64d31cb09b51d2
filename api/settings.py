"""The one typed settings object, read at the edge (CLI and services).

Libraries never read the environment: the composition root builds a
:class:`Settings` and passes explicit arguments down. Every field can be set
by an environment variable prefixed ``SECURE_FED_`` (for example
``SECURE_FED_DATABASE_URL``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "DEFAULT_WORKDIR"]

DEFAULT_WORKDIR = Path("secure-fed-work")


class Settings(BaseSettings):
    """Deployment settings for every ``secure-fed`` process.

    Attributes
    ----------
    environment
        ``development`` (default) or ``production``. Production refuses
        missing secrets and the embedded SQLite database.
    workdir
        Folder for the embedded defaults (SQLite ledger, demo output).
    database_url
        SQLAlchemy URL of the privacy ledger. Defaults to a SQLite file in
        ``workdir``; production uses PostgreSQL
        (``postgresql+psycopg://user@host/db``).
    key_passphrase
        Passphrase protecting private keys at rest (``SECURE_FED_KEY_PASSPHRASE``).
    """

    model_config = SettingsConfigDict(env_prefix="SECURE_FED_", extra="ignore")

    environment: str = Field(default="development", pattern="^(development|production)$")
    workdir: Path = DEFAULT_WORKDIR
    database_url: str | None = None
    key_passphrase: SecretStr | None = None

    @model_validator(mode="after")
    def _production_is_strict(self) -> Settings:
        if self.environment == "production":
            if not self.database_url or self.database_url.startswith("sqlite"):
                raise ValueError("database_url: production needs a PostgreSQL URL, not SQLite")
            if self.key_passphrase is None or len(self.key_passphrase.get_secret_value()) < 12:
                raise ValueError("key_passphrase: production needs a passphrase of 12+ characters")
        return self

    def resolved_database_url(self) -> str:
        """Return the ledger URL, defaulting to ``sqlite:///<workdir>/ledger.db``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.workdir / 'ledger.db').as_posix()}"
