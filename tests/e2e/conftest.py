"""Fixtures of the end-to-end tests: a PostgreSQL schema of its own per federation."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.privacy_ledger.conftest import _admin, pg_schema_url


@pytest.fixture
def pg_ledger() -> Iterator[str]:
    schema = "e2e_" + secrets.token_hex(6)
    _admin(f"CREATE SCHEMA {schema}")
    try:
        yield pg_schema_url(schema)
    finally:
        _admin(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
