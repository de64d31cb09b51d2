"""Fixtures of the REST tests: a seeded service on SQLite and (marker postgres) PostgreSQL."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.api.rest.helpers import Service, make_service
from tests.privacy_ledger.conftest import _admin, pg_schema_url


@pytest.fixture
def pg_url() -> Iterator[str]:
    schema = "rest_" + secrets.token_hex(6)
    _admin(f"CREATE SCHEMA {schema}")
    try:
        yield pg_schema_url(schema)
    finally:
        _admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(scope="module")
def pg_module_url() -> Iterator[str]:
    schema = "rest_" + secrets.token_hex(6)
    _admin(f"CREATE SCHEMA {schema}")
    try:
        yield pg_schema_url(schema)
    finally:
        _admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("rest")
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'ledger.db'}"
    else:
        url = request.getfixturevalue("pg_module_url")
    svc = make_service(url, folder)
    try:
        yield svc
    finally:
        svc.client.close()
        svc.ctx.close()


@pytest.fixture
def sqlite_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A fresh service of its own (tests that revoke tokens or change settings)."""
    folder = tmp_path_factory.mktemp("rest1")
    svc = make_service(f"sqlite:///{folder / 'ledger.db'}", folder)
    try:
        yield svc
    finally:
        svc.client.close()
        svc.ctx.close()
