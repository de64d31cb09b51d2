"""Every operator error is two lines (error: [CODE] ..., hint: ...), no traceback.

``--debug`` shows the traceback instead. Database failures use real backends:
a SQLite path in a missing folder, a PostgreSQL port nobody listens on, a file
that is not a database, a database that is not a ledger.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from api.cli import app
from api.cli.errors import DatabaseMissing, describe

runner = CliRunner()
DEAD_POSTGRES = "postgresql+psycopg://secure_fed@127.0.0.1:1/nothing"


@pytest.fixture(autouse=True)
def _clean_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("SECURE_FED_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _two_lines(result: Result, code: str, status: int) -> list[str]:
    lines = result.stderr.splitlines()
    assert result.exit_code == status, result.output
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith(f"error: [{code}] "), lines
    assert lines[1].startswith("hint: ") and len(lines[1]) > len("hint: ") + 10
    assert "Traceback" not in result.output
    return lines


def _run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def test_read_only_commands_never_create_the_database(tmp_path: Path) -> None:
    for args in (
        ["budget", "show", "--participant", "hospital-1"],
        ["ledger", "verify"],
        ["ledger", "head"],
        ["ledger", "export-head", "--out", "x"],
    ):
        error, hint = _two_lines(_run(*args), "CLI_DATABASE_MISSING", 2)
        assert "secure-fed-work/ledger.db" in error, args
        assert "sqlite:///secure-fed-work/demo/ledger.db" in hint
    assert not (tmp_path / "secure-fed-work").exists()


def test_sqlite_in_a_missing_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/folder/ledger.db"
    error, _ = _two_lines(
        _run("budget", "show", "--participant", "h1", "--db", url), "CLI_DATABASE_MISSING", 2
    )
    assert f"{tmp_path}/no/such/folder/ledger.db" in error
    set_args = ["budget", "set", "--participant", "h1", "--asset", "a", "--epsilon", "1"]
    error, _ = _two_lines(_run(*set_args, "--db", url), "CLI_DATABASE_FOLDER_MISSING", 2)
    assert f"{tmp_path}/no/such/folder" in error
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["budget", "show", "--participant", "h1"],
        ["budget", "set", "--participant", "h1", "--asset", "a", "--epsilon", "1"],
        ["ledger", "verify"],
    ],
)
def test_unreachable_postgresql(args: list[str]) -> None:
    error, _ = _two_lines(_run(*args, "--db", DEAD_POSTGRES), "CLI_DATABASE_UNREACHABLE", 2)
    assert "127.0.0.1" in error and "port 1" in error


def test_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "notes.db").write_text("just some notes, not SQLite\n" * 100)
    result = _run("budget", "show", "--participant", "h1", "--db", "sqlite:///notes.db")
    _two_lines(result, "CLI_DATABASE_ERROR", 1)


def test_a_database_that_is_not_a_ledger(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "other.db") as db:
        db.execute("create table t (x)")
    url = "sqlite:///other.db"
    shown = _run("budget", "show", "--participant", "h1", "--db", url)
    _two_lines(shown, "LEDGER_SCHEMA_OUTDATED", 2)
    _two_lines(_run("ledger", "verify", "--db", url), "LEDGER_LOG_NOT_INITIALIZED", 1)


def test_bad_url_and_bad_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run("budget", "show", "--participant", "h1", "--db", "mysql://x/y")
    _two_lines(result, "LEDGER_DATABASE_URL_INVALID", 2)
    monkeypatch.setenv("SECURE_FED_ENVIRONMENT", "staging")
    error, _ = _two_lines(_run("ledger", "verify"), "CLI_SETTINGS_INVALID", 2)
    assert "environment" in error


def test_wrong_database_for_the_log_names_the_cause(tmp_path: Path) -> None:
    """An empty ledger (e.g. the default one, not the demo's) says its log is empty."""
    from privacy_ledger import PrivacyLedger

    created = PrivacyLedger.from_url("sqlite:///empty.db")  # the schema, no audit log
    created.engine.dispose()
    error, hint = _two_lines(
        _run("ledger", "verify", "--db", "sqlite:///empty.db"), "CLI_AUDIT_LOG_EMPTY", 1
    )
    assert "secure-fed-work/demo/ledger.db" in hint


def test_debug_shows_the_traceback() -> None:
    result = runner.invoke(app, ["--debug", "ledger", "verify", "--db", "sqlite:///absent.db"])
    assert result.exit_code == 1  # the exception propagates: no two-line error, no exit 2
    assert isinstance(result.exception, DatabaseMissing)


def test_installed_command_prints_two_lines_and_debug_a_traceback(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    base = [sys.executable, "-c", "from api.cli import main; main()"]
    args = ["budget", "show", "--participant", "h1", "--db", DEAD_POSTGRES]
    plain = subprocess.run([*base, *args], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert plain.returncode == 2
    assert plain.stderr.count("\n") == 2 and "Traceback" not in plain.stderr, plain.stderr
    assert plain.stderr.startswith("error: [CLI_DATABASE_UNREACHABLE] ")
    debug = subprocess.run(
        [*base, "--debug", *args], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert debug.returncode == 1 and "OperationalError" in debug.stderr
    assert "Traceback" in debug.stderr


def test_untranslated_exceptions_are_named_as_bugs() -> None:
    error, hint, status = describe(KeyError("surprise"))
    assert error == "error: [CLI_INTERNAL_ERROR] unexpected KeyError: 'surprise'"
    assert "--debug" in hint and status == 1
    error, _, status = describe(PermissionError(13, "Permission denied", "/etc/x"))
    assert error == "error: [CLI_IO_FAILED] /etc/x: Permission denied" and status == 1


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("postgres://fed:secret@127.0.0.1:1/ledger", "no 'postgres' dialect"),
        ("postgresql+psycopg2://fed:secret@127.0.0.1:1/ledger", "driver 'psycopg2'"),
    ],
)
@pytest.mark.parametrize(
    "args",
    [
        ["budget", "show", "--participant", "hospital-1"],
        ["ledger", "verify"],
        ["api", "token", "list"],
        ["deploy", "local", "--exit"],
    ],
)
def test_a_postgres_url_sqlalchemy_cannot_open_is_url_invalid(
    args: list[str], url: str, why: str
) -> None:
    error, hint = _two_lines(_run(*args, "--db", url), "LEDGER_DATABASE_URL_INVALID", 2)
    assert why in error and "write postgresql+psycopg://" in error
    assert "postgresql+psycopg://user@host/db" in hint
    assert "secret" not in error + hint  # the URL's password is never echoed


def test_a_postgres_url_in_the_settings_is_url_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECURE_FED_DATABASE_URL", "postgres://fed@127.0.0.1:1/ledger")
    for args in (["budget", "show", "--participant", "h1"], ["api"]):
        _two_lines(_run(*args), "LEDGER_DATABASE_URL_INVALID", 2)


@pytest.mark.parametrize(
    ("args", "fragment", "command"),
    [
        (["demo", "--epsilon", "abc"], "Invalid value for '--epsilon': 'abc'", "secure-fed demo"),
        (["demo", "--rounds", "x"], "Invalid value for '--rounds'", "secure-fed demo"),
        (["budget", "show"], "Missing option '--participant'", "secure-fed budget show"),
        (["ledger", "verify", "--bogus"], "No such option '--bogus'", "secure-fed ledger verify"),
        (["--bogus"], "No such option '--bogus'", "secure-fed"),
        (["nosuch"], "No such command 'nosuch'", "secure-fed"),
    ],
)
def test_a_parser_error_is_a_coded_usage_error(
    args: list[str], fragment: str, command: str
) -> None:
    error, hint = _two_lines(_run(*args), "CLI_USAGE_INVALID", 2)
    assert fragment in error
    assert hint == f"hint: run '{command} --help' for its options"


def test_no_arguments_still_show_the_help() -> None:
    result = _run("budget")
    assert "Usage:" in result.output and "CLI_USAGE_INVALID" not in result.output


def test_the_installed_command_prints_a_parser_error_as_two_lines() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from api.cli import main; main()", "demo", "--epsilon", "abc"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: [CLI_USAGE_INVALID] Invalid value for '--epsilon'")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another socket of this process listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_busy_port_stops_the_api_before_it_touches_the_ledger(
    busy_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger.db"
    ledger.touch()
    monkeypatch.setenv("SECURE_FED_DATABASE_URL", f"sqlite:///{ledger}")
    error, hint = _two_lines(_run("api", "--port", str(busy_port)), "CLI_PORT_IN_USE", 2)
    assert f"127.0.0.1:{busy_port}" in error and "already in use" in error
    assert "--port" in hint
    assert ledger.stat().st_size == 0  # no schema migrated, no key loaded


@pytest.mark.parametrize("party", ["helper", "keyauthority"])
def test_a_busy_port_stops_a_party_service_before_its_audit_log(
    party: str, busy_port: int, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    args = [party, "serve", "--keys", str(tmp_path / "keys"), "--state", str(state)]
    error, _ = _two_lines(
        _run(*args, "--insecure-dev", "--port", str(busy_port)), "CLI_PORT_IN_USE", 2
    )
    assert str(busy_port) in error
    assert not state.exists()  # no audit log opened, no service.started recorded


def test_a_host_that_does_not_resolve_is_an_option_error(tmp_path: Path) -> None:
    args = ["helper", "serve", "--keys", str(tmp_path), "--state", str(tmp_path / "s")]
    error, _ = _two_lines(
        _run(*args, "--insecure-dev", "--host", "localhost", "--port", "70000"),
        "CLI_OPTION_INVALID",
        2,
    )
    assert "--port" in error
