"""Fixtures for ledger tests: every test using ``db_url`` runs on SQLite and PostgreSQL.

PostgreSQL tests get a fresh schema of their own (``search_path`` carried in
the URL), so helpers running tests at the same time never collide.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text

from privacy_ledger import PrivacyLedger

PG_BASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pg_schema_url(schema: str) -> str:
    return f"{PG_BASE_URL}?options=-csearch_path%3D{schema}"


def _admin(sql: str) -> None:
    engine = create_engine(PG_BASE_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


@contextmanager
def pg_schema(prefix: str) -> Iterator[str]:
    """A fresh PostgreSQL schema named ``prefix`` + random hex: its URL, dropped after."""
    schema = prefix + secrets.token_hex(6)
    _admin(f"CREATE SCHEMA {schema}")
    try:
        yield pg_schema_url(schema)
    finally:
        _admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg_schema("pl_") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'ledger.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def ledger(db_url: str) -> Iterator[PrivacyLedger]:
    led = PrivacyLedger.from_url(db_url)
    try:
        yield led
    finally:
        led.engine.dispose()
