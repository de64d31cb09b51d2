"""The schema comes only from migrations, and the migrations agree with the models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from privacy_ledger.db import (
    MIGRATIONS_DIR,
    _config,
    create_ledger_engine,
    current_revision,
    ledger_metadata,
    upgrade,
)
from privacy_ledger.errors import DatabaseUrlInvalid


def _head() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert any(MIGRATIONS_DIR.glob("versions/0001_*.py"))


def test_models_and_migrations_agree(db_url: str) -> None:
    engine = create_ledger_engine(db_url)
    try:
        assert current_revision(engine) is None
        assert not set(inspect(engine).get_table_names()) & {"budgets", "privacy_events"}
        upgrade(engine)
        assert current_revision(engine) == _head()
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(ctx, ledger_metadata())
        assert diff == []
        tables = set(inspect(engine).get_table_names())
        expected = {
            "participants",
            "data_assets",
            "budgets",
            "privacy_events",
            "rounds",
            "uploads",
            "decryption_requests",
        }
        assert expected <= tables
    finally:
        engine.dispose()


def test_upgrade_is_idempotent_and_downgrade_works(db_url: str) -> None:
    from alembic import command

    engine = create_ledger_engine(db_url)
    try:
        upgrade(engine)
        upgrade(engine)
        config = _config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "base")
        assert "budgets" not in inspect(engine).get_table_names()
        upgrade(engine)
        assert "budgets" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.parametrize("url", ["", "   ", "mysql://u@h/db", "oracle://x"])
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(DatabaseUrlInvalid, match="url"):
        create_ledger_engine(url)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgres://fed:secret@127.0.0.1:1/ledger", "no 'postgres' dialect"),
        ("postgresql+psycopg2://fed:secret@127.0.0.1:1/ledger", "driver 'psycopg2'"),
    ],
)
def test_a_postgres_url_sqlalchemy_cannot_open_is_typed(url: str, why: str) -> None:
    """Library callers get the typed error and its hint, not "Can't load plugin"."""
    with pytest.raises(DatabaseUrlInvalid) as raised:
        create_ledger_engine(url)
    assert why in raised.value.message and "write postgresql+psycopg://" in raised.value.message
    assert "secret" not in str(raised.value)
