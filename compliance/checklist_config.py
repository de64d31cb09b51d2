"""The pre-launch checklist configuration: a TOML file describing the deployment.

Every table and key is optional; an item whose facts are missing says
``manual`` (or ``fail`` for a required control that must be configured, such
as TLS or backups). Unknown tables or keys are refused, naming them, so a
typo cannot silently skip a check. The format is documented in
``docs/compliance.md``::

    environment = "production"
    [database]   url, host
    [log]        signing_key, signing_host, public_key
    [keys]       private_keys (list of key files)
    [tls]        certificate, private_key, ca
    [roles]      aggregator_host, key_authority_host, helper_host
    [filter]     enabled, exclude_outliers
    [dp]         require_secure_rng
    [backups]    schedule, location
    [parties]    folder (the deployment folder of the key authority's and helper's logs)
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compliance.errors import ChecklistConfigInvalid

__all__ = ["ChecklistConfig", "load_config", "SCHEMA"]

#: Allowed tables, their keys and the type each key must have.
SCHEMA: dict[str, dict[str, type | tuple[type, ...]]] = {
    "database": {"url": str, "host": str},
    "log": {"signing_key": str, "signing_host": str, "public_key": str},
    "keys": {"private_keys": list},
    "tls": {"certificate": str, "private_key": str, "ca": str},
    "roles": {"aggregator_host": str, "key_authority_host": str, "helper_host": str},
    "filter": {"enabled": bool, "exclude_outliers": bool},
    "dp": {"require_secure_rng": bool},
    "backups": {"schedule": str, "location": str},
    "parties": {"folder": str},
}
_TOP = {"environment": str}
_ENVIRONMENTS = ("development", "production")
_MAX_BYTES = 1 << 16


@dataclass(frozen=True, kw_only=True)
class ChecklistConfig:
    """A parsed, validated checklist configuration.

    Attributes
    ----------
    environment
        ``production`` makes production-only items required.
    tables
        ``table -> key -> value`` as in :data:`SCHEMA`.
    base
        Folder relative paths are resolved against (the config file's folder).
    """

    environment: str = "development"
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    base: Path = Path(".")

    def get(self, table: str, key: str) -> Any:
        """Return a configured value, or ``None``."""
        return self.tables.get(table, {}).get(key)

    def path(self, table: str, key: str) -> Path | None:
        """Return a configured path, resolved against :attr:`base`, or ``None``."""
        value = self.get(table, key)
        return None if value is None else (self.base / Path(value).expanduser())

    def paths(self, table: str, key: str) -> list[Path]:
        """Return a configured list of paths, resolved against :attr:`base`."""
        return [self.base / Path(p).expanduser() for p in self.get(table, key) or []]


def _check(data: dict[str, Any]) -> None:
    for key, value in data.items():
        if key in _TOP:
            if not isinstance(value, str) or value not in _ENVIRONMENTS:
                raise ChecklistConfigInvalid(f"environment: must be one of {_ENVIRONMENTS}")
            continue
        allowed = SCHEMA.get(key)
        if allowed is None or not isinstance(value, dict):
            raise ChecklistConfigInvalid(
                f"{key}: unknown table; allowed: {', '.join(sorted([*SCHEMA, *_TOP]))}"
            )
        for name, item in value.items():
            want = allowed.get(name)
            if want is None:
                raise ChecklistConfigInvalid(
                    f"{key}.{name}: unknown key; allowed: {', '.join(sorted(allowed))}"
                )
            if not isinstance(item, want) or (
                isinstance(item, list) and not all(isinstance(p, str) for p in item)
            ):
                raise ChecklistConfigInvalid(f"{key}.{name}: has the wrong type")


def load_config(path: Path | None) -> ChecklistConfig:
    """Read and validate a checklist configuration (``None``: an empty configuration).

    Raises
    ------
    ChecklistConfigInvalid
        When the file cannot be read, is not TOML, or has an unknown or mistyped key.
    """
    if path is None:
        return ChecklistConfig()
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise ChecklistConfigInvalid(f"config: cannot read {path}: {exc.strerror}") from None
    if len(raw) > _MAX_BYTES:
        raise ChecklistConfigInvalid(f"config: {path} is larger than {_MAX_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ChecklistConfigInvalid(f"config: {path} is not TOML ({exc})") from None
    _check(data)
    tables = {k: dict(v) for k, v in data.items() if k in SCHEMA}
    return ChecklistConfig(
        environment=data.get("environment", "development"),
        tables=tables,
        base=Path(path).resolve().parent,
    )
