"""``secure-fed budget show`` and ``budget set`` through Typer's CliRunner."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from crypto.sm import SM2PrivateKey
from privacy_ledger import MechanismEvent, PrivacyLedger, verify_log
from privacy_ledger.audit.log import AuditLog

runner = CliRunner()


def _event() -> MechanismEvent:
    return MechanismEvent(
        noise_multiplier=1.0, sample_rate=0.01, steps=500, delta=1e-5, max_grad_norm=1.0
    )


def _budget_set(**options: str) -> list[str]:
    """Argv of ``budget set``: ``--name value`` per keyword (``audit_key`` is ``--audit-key``)."""
    flags = (x for name, value in options.items() for x in (f"--{name.replace('_', '-')}", value))
    return ["budget", "set", *flags]


def _own_key(folder: Path) -> SM2PrivateKey:
    """Write the ledger's own audit key beside it, as ``secure-fed demo`` does (0600)."""
    key = SM2PrivateKey.generate()
    path = folder / "log-signing-key.pem"
    path.touch(mode=0o600)
    path.write_bytes(key.to_pem_unencrypted_insecure())
    return key


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    key = _own_key(tmp_path)
    result = runner.invoke(
        app,
        _budget_set(
            participant="h1",
            asset="ct",
            epsilon="4",
            institution="Hospital One",
            kind="hospital",
            audit_origin="test/ledger",
            db=url,
        ),
    )
    assert result.exit_code == 0, result.output
    assert "limit 4 at delta 1e-05 (rdp)" in result.output
    # the charges are written as a federation writes them: audited, so the ledger seal covers them
    ledger = PrivacyLedger.from_url(url, audit=AuditLog(signer=key, origin="test/ledger"))
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


def test_set_without_an_audit_key_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """No --audit-key and no key of the ledger's own: refused, typed, the ledger untouched."""
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    args = _budget_set(
        participant="b1", asset="loans", epsilon="3", institution="Bank B", kind="bank", db=url
    )
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2, refused.output
    assert "[CLI_AUDIT_KEY_MISSING]" in refused.stderr and "--audit-key" in refused.stderr
    assert not (tmp_path / "plain.db").exists()


def test_set_without_audit_key_is_audited_with_the_ledger_s_own_key(db: str) -> None:
    """Lowering a limit below what is spent is audited with the key beside the ledger."""
    folder = Path(db.removeprefix("sqlite:///")).parent
    result = runner.invoke(app, _budget_set(participant="h1", asset="ct", epsilon="0.5", db=db))
    assert result.exit_code == 0, result.output
    assert "limit 0.5" in result.output and "not audited" not in result.output
    key = SM2PrivateKey.from_pem((folder / "log-signing-key.pem").read_bytes(), passphrase=None)
    ledger = PrivacyLedger.from_url(db, create=False)
    try:
        verify_log(ledger.engine, public_key=key.public_key)
        with ledger.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "select entry from audit_entries where event = 'budget.set'"
            ).fetchall()
    finally:
        ledger.engine.dispose()
    assert len(rows) == 2 and b'"epsilon_limit":"0.5"' in rows[-1][0]
    verified = runner.invoke(app, ["ledger", "verify", "--db", db])
    assert verified.exit_code == 0, verified.output


def test_an_own_key_of_another_log_is_refused(db: str) -> None:
    folder = Path(db.removeprefix("sqlite:///")).parent
    (folder / "log-signing-key.pem").unlink()
    _own_key(folder)  # a fresh key, not the one that signs this ledger's log
    before = _snapshot(folder / "ledger.db")
    refused = runner.invoke(app, _budget_set(participant="h1", asset="ct", epsilon="2", db=db))
    assert refused.exit_code == 2 and "[CLI_AUDIT_KEY_MISSING]" in refused.stderr
    assert "not the key of this ledger's audit log" in refused.stderr
    assert _snapshot(folder / "ledger.db") == before


@pytest.mark.postgres
def test_set_on_postgresql_needs_audit_key(tmp_path: Path) -> None:
    from tests.privacy_ledger.conftest import pg_schema

    with pg_schema("cli_budget_") as url:
        args = _budget_set(
            participant="b1", asset="loans", epsilon="3", institution="Bank B", db=url
        )
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and "[CLI_AUDIT_KEY_MISSING]" in refused.stderr
        assert "PostgreSQL" in refused.stderr
        key_path = tmp_path / "audit.pem"
        key = _own_key(tmp_path)
        key_path.write_bytes((tmp_path / "log-signing-key.pem").read_bytes())
        audited = runner.invoke(
            app, [*args, "--audit-key", str(key_path), "--audit-origin", "pg/audit"]
        )
        assert audited.exit_code == 0, audited.output
        ledger = PrivacyLedger.from_url(url, create=False)
        try:
            assert verify_log(ledger.engine, public_key=key.public_key).tree_size == 1
        finally:
            ledger.engine.dispose()


GOOD = {
    "participant": "h2",
    "asset": "ct",
    "epsilon": "4",
    "delta": "1e-5",
    "institution": "Hospital Two",
    "kind": "hospital",
    "audit_origin": "test/ledger",  # a fresh ledger starts its own audit log
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
