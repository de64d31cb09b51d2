"""Fixtures of the end-to-end tests: a PostgreSQL schema of its own per federation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.privacy_ledger.conftest import pg_schema


@pytest.fixture
def pg_ledger() -> Iterator[str]:
    with pg_schema("e2e_") as url:
        yield url
