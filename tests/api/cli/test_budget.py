"""``secure-fed budget show`` and ``budget set`` through Typer's CliRunner."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from privacy_ledger import MechanismEvent, PrivacyLedger

runner = CliRunner()


def _event() -> MechanismEvent:
    return MechanismEvent(
        noise_multiplier=1.0, sample_rate=0.01, steps=500, delta=1e-5, max_grad_norm=1.0
    )


def _budget_set(**options: str) -> list[str]:
    """Argv of ``budget set``: ``--name value`` per keyword (``audit_key`` is ``--audit-key``)."""
    flags = (x for name, value in options.items() for x in (f"--{name.replace('_', '-')}", value))
    return ["budget", "set", *flags]


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    result = runner.invoke(
        app,
        _budget_set(
            participant="h1",
            asset="ct",
            epsilon="4",
            institution="Hospital One",
            kind="hospital",
            db=url,
        ),
    )
    assert result.exit_code == 0, result.output
    assert "limit 4 at delta 1e-05 (rdp)" in result.output
    ledger = PrivacyLedger.from_url(url)
    for r in ("r1", "r2"):
        ledger.commit(ledger.reserve("h1", "ct", _event(), round_id=r).id)
    ledger.reserve("h1", "ct", _event(), round_id="r3")
    ledger.engine.dispose()
    return url


def test_show_json_matches_the_ledger(db: str) -> None:
    result = runner.invoke(app, ["budget", "show", "--participant", "h1", "--db", db, "--json"])
    assert result.exit_code == 0, result.output
    [shown] = json.loads(result.output)
    ledger = PrivacyLedger.from_url(db)
    status = ledger.budget_status("h1", "ct")
    ledger.engine.dispose()
    assert Decimal(shown["limit"]) == 4
    assert Decimal(shown["spent"]) == status.spent > 0
    assert Decimal(shown["reserved"]) == status.reserved > 0
    assert Decimal(shown["remaining"]) == status.remaining
    assert [r["round"] for r in shown["per_round"]] == ["r1", "r2"]
    assert Decimal(shown["per_round"][-1]["epsilon_after"]) == status.spent


def test_show_table(db: str) -> None:
    result = runner.invoke(
        app, ["budget", "show", "--participant", "h1", "--asset", "ct", "--db", db]
    )
    assert result.exit_code == 0, result.output
    assert "remaining" in result.output and "r2" in result.output


def test_show_uses_the_settings_url(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECURE_FED_DATABASE_URL", db)
    result = runner.invoke(app, ["budget", "show", "--participant", "h1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["asset"] == "ct"


def test_errors_are_typed_and_non_zero(db: str) -> None:
    unknown = runner.invoke(app, ["budget", "show", "--participant", "nobody", "--db", db])
    assert unknown.exit_code == 1
    assert "LEDGER_PARTICIPANT_UNKNOWN" in unknown.output
    no_budget = runner.invoke(
        app, ["budget", "show", "--participant", "h1", "--asset", "x", "--db", db]
    )
    assert no_budget.exit_code == 1 and "LEDGER_BUDGET_NOT_SET" in no_budget.output
    gdp = runner.invoke(
        app, _budget_set(participant="h1", asset="ct", epsilon="4", accountant="gdp", db=db)
    )
    assert gdp.exit_code == 1 and "allowed: prv, rdp" in gdp.output
    bad_url = runner.invoke(app, ["budget", "show", "--participant", "h1", "--db", "mysql://x"])
    assert bad_url.exit_code == 2 and "LEDGER_DATABASE_URL_INVALID" in bad_url.output


def test_set_changes_the_limit(db: str) -> None:
    result = runner.invoke(
        app, _budget_set(participant="h1", asset="ct", epsilon="8.5", accountant="prv", db=db)
    )
    assert result.exit_code == 0, result.output
    assert "limit 8.5" in result.output and "(prv)" in result.output


def test_set_with_audit_key_writes_a_verifiable_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crypto.sm import SM2PrivateKey
    from privacy_ledger import verify_log

    monkeypatch.setenv("SECURE_FED_KEY_PASSPHRASE", "correct horse battery")
    key = SM2PrivateKey.generate()
    key_path = tmp_path / "audit.pem"
    key_path.write_bytes(key.to_pem(passphrase=b"correct horse battery"))
    url = f"sqlite:///{tmp_path / 'audited.db'}"
    base = {"participant": "b1", "asset": "loans", "db": url, "audit_key": str(key_path)}
    first = runner.invoke(
        app,
        _budget_set(
            **base,
            epsilon="3",
            institution="Bank B",
            kind="bank",
            audit_origin="bank-b.example/audit",
        ),
    )
    assert first.exit_code == 0, first.output
    second = runner.invoke(app, _budget_set(**base, epsilon="2.5"))  # origin read from the log
    assert second.exit_code == 0, second.output
    ledger = PrivacyLedger.from_url(url)
    try:
        report = verify_log(ledger.engine, public_key=key.public_key)
        assert report.tree_size == 2 and report.origin == "bank-b.example/audit"
    finally:
        ledger.engine.dispose()


def test_set_without_audit_key_warns_and_production_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    args = _budget_set(
        participant="b1", asset="loans", epsilon="3", institution="Bank B", kind="bank", db=url
    )
    plain = runner.invoke(app, args)
    assert plain.exit_code == 0 and "not audited" in plain.output
    monkeypatch.setenv("SECURE_FED_ENVIRONMENT", "production")
    monkeypatch.setenv("SECURE_FED_DATABASE_URL", "postgresql+psycopg://u@db.example/ledger")
    monkeypatch.setenv("SECURE_FED_KEY_PASSPHRASE", "a long enough passphrase")
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "refuses unaudited" in refused.output


GOOD = {
    "participant": "h2",
    "asset": "ct",
    "epsilon": "4",
    "delta": "1e-5",
    "institution": "Hospital Two",
    "kind": "hospital",
}


def _args(url: str, **override: str) -> list[str]:
    return _budget_set(db=url, **{**GOOD, **override})


def _snapshot(path: Path) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(path) as db:
        tables = [t for (t,) in db.execute("select name from sqlite_master where type='table'")]
        return {t: sorted(db.execute(f'select * from "{t}"').fetchall(), key=repr) for t in tables}


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"epsilon": "-1"}, "[LEDGER_PARAMETER_INVALID] epsilon"),
        ({"epsilon": "0"}, "[LEDGER_PARAMETER_INVALID] epsilon"),
        ({"epsilon": "nan"}, "[LEDGER_PARAMETER_INVALID] epsilon"),
        ({"epsilon": "inf"}, "[LEDGER_PARAMETER_INVALID] epsilon"),
        ({"epsilon": "four"}, "[LEDGER_PARAMETER_INVALID] epsilon"),
        ({"delta": "0"}, "[LEDGER_PARAMETER_INVALID] delta"),
        ({"delta": "1.5"}, "[LEDGER_PARAMETER_INVALID] delta"),
        ({"delta": "nan"}, "[LEDGER_PARAMETER_INVALID] delta"),
        ({"delta": "tiny"}, "Invalid value"),
        ({"participant": "bad id!"}, "[LEDGER_PARAMETER_INVALID] participant_id"),
        ({"asset": ""}, "[LEDGER_PARAMETER_INVALID] asset_id"),
        ({"kind": "spaceship"}, "[LEDGER_PARAMETER_INVALID] kind"),
        ({"accountant": "gdp"}, "[LEDGER_ACCOUNTANT_NOT_ALLOWED]"),
    ],
)
def test_refused_set_writes_nothing_and_the_corrected_retry_succeeds(
    db: str, tmp_path: Path, bad: dict[str, str], fragment: str
) -> None:
    existing = Path(db.removeprefix("sqlite:///"))
    fresh = tmp_path / "fresh.db"
    before = _snapshot(existing)
    for url in (db, f"sqlite:///{fresh}"):
        refused = runner.invoke(app, _args(url, **bad))
        assert refused.exit_code in (1, 2) and fragment in refused.output, refused.output
        assert "Traceback" not in refused.output
    assert _snapshot(existing) == before  # nothing written, not even the participant
    assert not fresh.exists()  # no database created for a refused call
    for url in (db, f"sqlite:///{fresh}"):
        retried = runner.invoke(app, _args(url))
        assert retried.exit_code == 0, retried.output
        ledger = PrivacyLedger.from_url(url, create=False)
        try:
            assert ledger.budget_status("h2", "ct").limit == Decimal(4)
        finally:
            ledger.engine.dispose()
