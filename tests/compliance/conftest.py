"""Fixtures of the compliance tests: one small real ledger per session, keys, exports."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from compliance import Scope, export_report
from compliance.export import ExportResult
from crypto.sm import SM2PrivateKey
from privacy_ledger import create_ledger_engine
from tests.compliance.builder import Built, build_ledger


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    path = tmp_path_factory.mktemp("compliance-ledger") / "ledger.db"
    return build_ledger(f"sqlite:///{path}")


@pytest.fixture(scope="session")
def report_key() -> SM2PrivateKey:
    return SM2PrivateKey.generate()


@pytest.fixture
def engine(built: Built) -> Iterator[Engine]:
    eng = create_ledger_engine(built.url)
    try:
        yield eng
    finally:
        eng.dispose()


@pytest.fixture
def ledger_copy(built: Built, tmp_path: Path) -> Iterator[Engine]:
    """A private copy of the session ledger that a test may tamper with."""
    source = Path(built.url.removeprefix("sqlite:///"))
    target = tmp_path / "copy.db"
    shutil.copy(source, target)
    eng = create_ledger_engine(f"sqlite:///{target}")
    try:
        yield eng
    finally:
        eng.dispose()


Exporter = Callable[..., ExportResult]


@pytest.fixture
def export(engine: Engine, report_key: SM2PrivateKey, built: Built, tmp_path: Path) -> Exporter:
    """Export with the session keys: ``export(fmt, scope=..., name=...)``."""

    def run(
        fmt: str = "json",
        *,
        scope: Scope | None = None,
        name: str | None = None,
        eng: Engine | None = None,
        **options: object,
    ) -> ExportResult:
        out = tmp_path / (name or f"report.{fmt}")
        return export_report(
            eng or engine,
            fmt=fmt,
            out=out,
            scope=scope,
            signing_key=report_key,
            log_public_key=built.log_key.public_key,
            produced_by="officer@test",
            **options,
        )  # type: ignore[arg-type]

    return run
