"""``secure-fed api token create|list|revoke|rotate`` and the service's start-up refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from api.rest.context import build_context
from privacy_ledger.api_tokens import ApiTokenStore
from privacy_ledger.db import create_ledger_engine
from tests.api.rest.helpers import PARTICIPANTS, seed, settings_for

runner = CliRunner()


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ctx = build_context(settings_for(url, tmp_path))
    seed(ctx)
    ctx.close()
    return url


def _run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_create_list_rotate_revoke(db: str) -> None:
    code, out, err = _run("api", "token", "create", "--role", "officer", "--name", "al", "--db", db)
    assert code == 0 and out.startswith("sft_") and "shown only once" in err
    store = ApiTokenStore(create_ledger_engine(db))
    token = store.authenticate(out.strip())
    code, out, _ = _run(
        "api",
        "token",
        "create",
        "--role",
        "participant",
        "--participant",
        PARTICIPANTS[0],
        "--name",
        "h1",
        "--scope",
        "budgets:read",
        "--json",
        "--db",
        db,
    )
    created = json.loads(out)
    assert (
        code == 0 and created["scopes"] == ["budgets:read"] and created["token"].startswith("sft_")
    )
    code, out, _ = _run("api", "token", "list", "--json", "--db", db)
    rows = json.loads(out)
    assert [r["state"] for r in rows] == ["valid", "valid"]
    assert "sft_" not in out and "secret" not in out
    code, out, err = _run("api", "token", "rotate", token.id, "--db", db)
    assert code == 0 and store.authenticate(out.strip()).name == "al"
    code, out, _ = _run("api", "token", "revoke", created["id"], "--db", db)
    assert code == 0
    states = {
        r["id"]: r["state"]
        for r in json.loads(_run("api", "token", "list", "--json", "--db", db)[1])
    }
    assert states[token.id] == states[created["id"]] == "revoked"


@pytest.mark.parametrize(
    ("args", "code_text"),
    [
        (["create", "--role", "root", "--name", "x"], "LEDGER_PARAMETER_INVALID"),
        (
            ["create", "--role", "participant", "--participant", "nobody", "--name", "x"],
            "LEDGER_PARTICIPANT_UNKNOWN",
        ),
        (["revoke", "0123456789abcdef"], "LEDGER_TOKEN_UNKNOWN"),
    ],
)
def test_bad_token_commands_print_one_error(db: str, args: list[str], code_text: str) -> None:
    code, out, err = _run("api", "token", *args, "--db", db)
    assert code != 0 and f"[{code_text}]" in err and err.count("error:") == 1 and not out


def test_no_ledger_no_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    code, _, err = _run("api", "token", "list", "--db", url)
    assert code == 2 and "CLI_DATABASE_MISSING" in err
    assert not (tmp_path / "missing.db").exists()
    config = tmp_path / "api.toml"
    config.write_text(f'database_url = "{url}"\n')
    code, _, err = _run("api", "--config", str(config))
    assert code == 2 and "secure-fed demo" in err
    config.write_text('environment = "production"\n')
    code, _, err = _run("api", "--config", str(config))
    assert code == 2 and "CLI_SETTINGS_INVALID" in err and "api_session_secret" in err


def test_a_missing_audit_key_stops_the_service_before_uvicorn(db: str, tmp_path: Path) -> None:
    config = tmp_path / "api.toml"
    config.write_text(f'database_url = "{db}"\napi_audit_key_file = "{tmp_path / "nope.pem"}"\n')
    code, _, err = _run("api", "--config", str(config))
    assert code != 0 and "API_SERVICE_MISCONFIGURED" in err and "audit signing key" in err
