"""A budget changed without its audit entry: ``ledger verify`` and ``audit export`` fail loudly.

The ledger is a real one (the compliance tests' builder: audited budgets, rounds,
charges, a signed head) on SQLite and PostgreSQL. A library caller without an
audit log then lowers a limit below what is already spent: the log itself is
intact, so only the comparison of the ``budgets`` table with the log's
``budget.set`` entries can tell.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from api.cli import app
from privacy_ledger import PrivacyLedger, create_ledger_engine
from privacy_ledger.audit.verify.budgets import budget_disagreements, check_budget_limits
from privacy_ledger.errors import BudgetUnaudited
from tests.compliance.builder import ASSET, PARTICIPANTS, Built, build_ledger
from tests.privacy_ledger.conftest import pg_schema

runner = CliRunner()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def built(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Built, Path]]:
    pem = tmp_path / "log-pub.pem"
    if request.param == "sqlite":
        ledger = build_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", rounds=1)
        pem.write_bytes(ledger.log_key.public_key.to_pem())
        yield ledger, pem
        return
    with pg_schema("cli_unaudited_") as url:
        ledger = build_ledger(url, rounds=1)
        pem.write_bytes(ledger.log_key.public_key.to_pem())
        yield ledger, pem


def _unaudited_set(url: str, epsilon: str) -> None:
    """What a library caller without an audit log can do: change a limit, nothing logged."""
    ledger = PrivacyLedger(create_ledger_engine(url))
    try:
        ledger.set_budget(PARTICIPANTS[0], ASSET, epsilon=epsilon, delta=1e-5)
    finally:
        ledger.engine.dispose()


def _verify(url: str, pem: Path) -> Result:
    return runner.invoke(app, ["ledger", "verify", "--db", url, "--public-key", str(pem)])


def _export(url: str, pem: Path, out: Path) -> Result:
    args = ["audit", "export", "--format", "html", "--out", str(out), "--db", url]
    return runner.invoke(app, [*args, "--log-public-key", str(pem)])


def test_verify_fails_when_a_stored_limit_is_not_what_the_log_records(
    built: tuple[Built, Path],
) -> None:
    ledger, pem = built
    ok = _verify(ledger.url, pem)
    assert ok.exit_code == 0, ok.output
    assert "budgets: limit, delta and accountant as the audit log records" in ok.stdout
    _unaudited_set(ledger.url, "2")
    failed = _verify(ledger.url, pem)
    assert failed.exit_code == 1, failed.output
    stderr = failed.stderr
    assert "error: [LEDGER_BUDGET_UNAUDITED]" in stderr
    assert f"{PARTICIPANTS[0]}/{ASSET} epsilon_limit: table 2, audit log 10" in stderr
    assert "OK" not in failed.stdout


def test_the_library_check_names_each_item(built: tuple[Built, Path]) -> None:
    ledger, _ = built
    engine = create_ledger_engine(ledger.url)
    try:
        assert check_budget_limits(engine) == len(PARTICIPANTS)
        _unaudited_set(ledger.url, "2")
        [found] = budget_disagreements(engine)
        assert (found.participant, found.item, found.stored, found.logged) == (
            PARTICIPANTS[0],
            "epsilon_limit",
            "2",
            "10",
        )
        with pytest.raises(BudgetUnaudited) as raised:
            check_budget_limits(engine)
        assert raised.value.disagreements == (found,)
    finally:
        engine.dispose()


def test_export_exits_non_zero_on_a_cross_check_mismatch(
    built: tuple[Built, Path], tmp_path: Path
) -> None:
    ledger, pem = built
    ok = _export(ledger.url, pem, tmp_path / "ok.html")
    assert ok.exit_code == 0, ok.output
    _unaudited_set(ledger.url, "2")
    out = tmp_path / "mismatch.html"
    failed = _export(ledger.url, pem, out)
    assert failed.exit_code == 1, failed.output
    stderr = failed.stderr
    assert "error: [CLI_CROSS_CHECK_MISMATCH]" in stderr
    assert f"MISMATCH: {PARTICIPANTS[0]}/{ASSET} epsilon_limit: audit log 10" in stderr
    assert out.is_file()  # the report is written: it shows the disagreeing rows
