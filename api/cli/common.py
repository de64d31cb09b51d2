"""Helpers shared by the ``keys``, ``budget`` and ``ledger`` commands.

Settings, passphrases, size-limited file reads and opening the ledger
database. Read-only commands open the database with ``writable=False``: a
SQLite file that does not exist is a :class:`~api.cli.errors.DatabaseMissing`
error, never a new empty ledger. Every failure is a typed
:mod:`api.cli.errors` exception, rendered as two lines by the command group.
"""

from __future__ import annotations

import errno
import re
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from api.cli.errors import (
    DatabaseFolderMissing,
    DatabaseMissing,
    FileTooLarge,
    FileUnreadable,
    OptionInvalid,
    PassphraseUnavailable,
    PortInUse,
    SettingsInvalid,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from api.settings import Settings
    from crypto.sm import SM2PrivateKey

__all__ = [
    "settings",
    "database_url",
    "open_engine",
    "passphrase",
    "read_limited",
    "load_private_key",
    "check_database_url",
    "ensure_port_free",
    "sqlite_file",
]

DB_HELP = (
    "Ledger database URL, e.g. sqlite:///secure-fed-work/demo/ledger.db "
    "(default: SECURE_FED_DATABASE_URL, else ledger.db in the work directory)."
)


def settings() -> Settings:
    """Return the settings from the ``SECURE_FED_*`` environment.

    Raises
    ------
    SettingsInvalid
        Naming the first invalid field.
    """
    from pydantic import ValidationError

    from api.settings import Settings

    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "settings"
        raise SettingsInvalid(f"invalid settings: {field}: {first['msg']}") from None


def database_url(db: str | None) -> tuple[str, bool]:
    """Return the ledger URL and whether it came from the defaults (not ``--db``)."""
    if db is not None:
        return db, False
    configured = settings()
    return configured.resolved_database_url(), configured.database_url is None


def open_engine(db: str | None, *, writable: bool) -> Engine:
    """Create the ledger engine for ``db`` without creating any file when read-only.

    Parameters
    ----------
    db
        The ``--db`` option (``None``: settings, then the work directory default).
    writable
        ``False`` for commands that only read: a missing SQLite file is an error.
        ``True``: the file may be created, in an existing folder (the default
        work directory is created).

    Raises
    ------
    DatabaseMissing, DatabaseFolderMissing, SettingsInvalid
        As described above; ``DatabaseUrlInvalid`` for an unsupported URL.
    """
    url, defaulted = database_url(db)
    check_database_url(url)
    path = sqlite_file(url)
    if path is not None and not writable and not path.is_file():
        raise DatabaseMissing(f"no ledger database at {path} ({url})")
    if path is not None and writable and not path.parent.is_dir():
        if not defaulted:
            raise DatabaseFolderMissing(
                f"folder {path.parent} of the SQLite ledger {url} does not exist"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    from privacy_ledger.db import create_ledger_engine  # after the checks: alembic is slow

    return create_ledger_engine(url)


def check_database_url(url: str) -> None:
    """Refuse the PostgreSQL URLs SQLAlchemy cannot open here, before it tries.

    The ledger's own check (:func:`privacy_ledger.db.check_database_url`), which
    :func:`~privacy_ledger.db.create_ledger_engine` also runs for library and REST
    callers.

    Raises
    ------
    DatabaseUrlInvalid
        ``LEDGER_DATABASE_URL_INVALID``, naming the scheme to write instead.
    """
    from privacy_ledger.db import check_database_url as check_ledger_url

    check_ledger_url(url)


def ensure_port_free(host: str, port: int) -> None:
    """Bind ``host:port`` once and let go, so a busy port is a typed error before serving.

    ``SO_REUSEADDR`` is set as uvicorn sets it, so a port a stopped server left in
    ``TIME_WAIT`` counts as free.

    Raises
    ------
    PortInUse
        Another process listens on ``host:port``.
    OptionInvalid
        ``--host`` does not resolve or is not an address of this machine, or the port
        is out of range or privileged.
    """
    if not 0 <= port <= 65535:
        raise OptionInvalid(f"--port must be in [0, 65535], got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OptionInvalid(f"--host {host!r} does not resolve: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"cannot listen on {host}:{port}: address already in use") from None
            raise OptionInvalid(
                f"cannot listen on --host {host} --port {port}: {exc.strerror or exc}"
            ) from None


def sqlite_file(url: str) -> Path | None:
    """Return the file of a ``sqlite:///PATH`` URL (``None`` for memory or other backends)."""
    match = re.match(r"sqlite(\+\w+)?:///([^?]*)", url)
    if match is None or match[2] in ("", ":memory:") or match[2].startswith("file:"):
        return None
    return Path(match[2])


def passphrase(*, confirm: bool) -> bytes:
    """Return the key passphrase: ``SECURE_FED_KEY_PASSPHRASE``, else a terminal prompt.

    Raises
    ------
    PassphraseUnavailable
        When the variable is unset and standard input is not a terminal.
    """
    configured = settings().key_passphrase
    if configured is not None:
        return configured.get_secret_value().encode("utf-8")
    if not sys.stdin.isatty():
        raise PassphraseUnavailable(
            "a key passphrase is needed: SECURE_FED_KEY_PASSPHRASE is not set "
            "and there is no terminal to ask"
        )
    text = typer.prompt("Key passphrase", hide_input=True, confirmation_prompt=confirm)
    return str(text).encode("utf-8")


def read_limited(path: Path, limit: int, what: str) -> bytes:
    """Read at most ``limit`` bytes of ``path`` (a ``what``: key, signature...).

    Raises
    ------
    FileUnreadable, FileTooLarge
    """
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise FileUnreadable(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FileTooLarge(f"{what} {path} is larger than {limit} bytes")
    return data


def load_private_key(path: Path, *, limit: int = 1 << 16) -> SM2PrivateKey:
    """Load an SM2 private key PEM; decrypt it with :func:`passphrase` when encrypted.

    An unencrypted key is accepted with a warning on stderr.

    Raises
    ------
    FileUnreadable, FileTooLarge, PassphraseUnavailable, CryptoError
    """
    from crypto.sm import SM2PrivateKey

    pem = read_limited(path, limit, "private key")
    if b"ENCRYPTED PRIVATE KEY" in pem:
        return SM2PrivateKey.from_pem(pem, passphrase=passphrase(confirm=False))
    typer.echo(f"warning: private key {path} is not encrypted at rest", err=True)
    return SM2PrivateKey.from_pem(pem, passphrase=None)
