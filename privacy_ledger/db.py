"""Engine creation and the migration runner of the privacy ledger.

One database URL selects the backend: a SQLite file by default, PostgreSQL in
production (``postgresql+psycopg://user@host/db``). The schema is created and
changed only by the Alembic migrations shipped inside this package
(``privacy_ledger/migrations``), run programmatically by :func:`upgrade`.

Notes
-----
SQLite serializes writers: every transaction starts with ``BEGIN IMMEDIATE``
(the pysqlite driver's own deferred ``BEGIN`` is switched off), so a
check-then-reserve cannot interleave with another writer. PostgreSQL
serializes reservations per budget with ``SELECT ... FOR UPDATE`` on the budget
row (see :mod:`privacy_ledger.budget.service`).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, MetaData, create_engine, event, text
from sqlalchemy.pool import StaticPool

from privacy_ledger.errors import DatabaseUrlInvalid

__all__ = [
    "check_database_url",
    "create_ledger_engine",
    "upgrade",
    "current_revision",
    "head_revision",
    "ledger_metadata",
    "HEAD",
]

logger = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: Model modules whose tables the migrations create (audit tables are optional).
MODEL_MODULES = (
    "privacy_ledger.models",
    "privacy_ledger.audit.models",
    "privacy_ledger.api_tokens",
)
HEAD = "head"
_PG_LOCK_KEY = 0x5EC0FED0  # advisory lock serializing concurrent migration runs


def ledger_metadata() -> MetaData:
    """Import every ledger model module and return the shared ``MetaData``.

    Returns
    -------
    MetaData
        ``Base.metadata`` with the budget tables and, once present, the audit tables.
    """
    for name in MODEL_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    from privacy_ledger.models import Base

    return Base.metadata


def _sqlite_immediate(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def check_database_url(url: str) -> None:
    """Refuse the PostgreSQL URLs SQLAlchemy cannot open here, before it tries.

    ``postgres://`` (the scheme of Heroku-style URLs) is no SQLAlchemy dialect, and
    the only PostgreSQL driver installed is psycopg 3: ``postgresql://`` and
    ``postgresql+psycopg://`` work, ``postgresql+psycopg2://`` and the like do not.
    Without this check SQLAlchemy raises its untyped "Can't load plugin" error.
    The message never repeats the URL (it may carry a password).

    Raises
    ------
    DatabaseUrlInvalid
        ``LEDGER_DATABASE_URL_INVALID``, naming the scheme to write instead.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    dialect, _, driver = scheme.partition("+")
    if dialect not in ("postgres", "postgresql") or (
        dialect == "postgresql" and driver in ("", "psycopg")
    ):
        return
    why = (
        "SQLAlchemy has no 'postgres' dialect"
        if dialect == "postgres"
        else f"driver {driver!r} is not installed (psycopg 3 is)"
    )
    raise DatabaseUrlInvalid(
        f"url: a {scheme}:// URL cannot be opened: {why}; write postgresql+psycopg:// "
        "with the same user, host and database"
    )


def create_ledger_engine(url: str, *, echo: bool = False, pool_size: int = 5) -> Engine:
    """Create an engine for the ledger database at ``url``.

    Parameters
    ----------
    url
        SQLAlchemy URL: ``sqlite:///path.db``, ``sqlite://`` (in memory, one
        shared connection) or ``postgresql+psycopg://...``. A PostgreSQL URL may
        carry ``?options=-csearch_path%3D<schema>`` to use a dedicated schema.
    echo
        Log every SQL statement (debugging only).
    pool_size
        PostgreSQL connections kept open (plus up to 10 more under load);
        size it to the number of concurrent callers.

    Returns
    -------
    Engine
        An engine configured for serialized reservations on this backend.

    Raises
    ------
    DatabaseUrlInvalid
        When ``url`` is empty, names a backend other than SQLite or PostgreSQL, or
        a PostgreSQL scheme or driver that cannot be opened (:func:`check_database_url`).
    """
    if not isinstance(url, str) or not url.strip():
        raise DatabaseUrlInvalid("url: empty database URL")
    check_database_url(url)
    backend = url.split(":", 1)[0].split("+", 1)[0]
    if backend == "sqlite":
        in_memory = url.rstrip("/") in ("sqlite:", "sqlite://") or ":memory:" in url
        kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False, "timeout": 60}}
        if in_memory:
            kwargs["poolclass"] = StaticPool
        engine = create_engine(url, echo=echo, **kwargs)
        _sqlite_immediate(engine)
        return engine
    if backend == "postgresql":
        if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
            raise DatabaseUrlInvalid(f"pool_size: must be an int >= 1, got {pool_size!r}")
        return create_engine(url, echo=echo, pool_pre_ping=True, pool_size=pool_size)
    raise DatabaseUrlInvalid(
        f"url: backend {backend!r} is not supported; use 'sqlite' or 'postgresql+psycopg'"
    )


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade(engine: Engine, revision: str = HEAD) -> None:
    """Bring the schema of ``engine`` up to ``revision`` (default: the newest).

    Concurrent callers on PostgreSQL are serialized by an advisory lock, so
    several processes may open the same fresh database at once.

    Parameters
    ----------
    engine
        Engine returned by :func:`create_ledger_engine`.
    revision
        Target Alembic revision; ``"head"`` for the newest.
    """
    config = _config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    logger.info("ledger schema upgraded to %s", revision)


def head_revision() -> str | None:
    """Return the newest revision shipped in ``privacy_ledger/migrations``."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """Return the revision the database at ``engine`` is at (``None`` if empty)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()
