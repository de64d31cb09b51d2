"""Fixtures of the REST tests: a seeded service on SQLite and (marker postgres) PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.rest.helpers import Service, make_service
from tests.privacy_ledger.conftest import pg_schema


@pytest.fixture
def pg_url() -> Iterator[str]:
    with pg_schema("rest_") as url:
        yield url


@pytest.fixture(scope="module")
def pg_module_url() -> Iterator[str]:
    with pg_schema("rest_") as url:
        yield url


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
