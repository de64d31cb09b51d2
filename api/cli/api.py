"""``secure-fed api``: serve the REST API under uvicorn, and manage its API tokens.

``secure-fed api [--config FILE]`` serves the ledger named by the settings
(:class:`api.rest.settings.ApiSettings`; by default the demo's
``secure-fed-work/demo/ledger.db`` with its audit signing key). The settings
are validated and the keys loaded once before uvicorn starts, so a bad
configuration is one ``error:`` line, not a traceback per worker. In
development without ``SECURE_FED_API_SESSION_SECRET`` a random session key is
generated per start and handed to every worker.

``secure-fed api token create|list|revoke|rotate`` manage the tokens in the
ledger database (administrators with access to it); a created token's secret
is printed once and never stored.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from api.cli.core import CliCommand, CliGroup
from api.cli.errors import DatabaseMissing, SettingsInvalid

if TYPE_CHECKING:
    from api.rest.settings import ApiSettings
    from privacy_ledger.api_tokens import ApiToken, ApiTokenStore

api_app = typer.Typer(
    help="Serve the REST API (budgets, audit log, reports, rounds) and manage its tokens.",
    cls=CliGroup,
    invoke_without_command=True,
)
token_app = typer.Typer(help="Create, list, revoke and rotate API tokens.", cls=CliGroup)
api_app.add_typer(token_app, name="token", no_args_is_help=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", metavar="FILE", help="TOML settings file (SECURE_FED_* env wins)."),
]
DbOption = Annotated[
    str | None,
    typer.Option("--db", metavar="URL", help="Ledger database URL (default: the settings')."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _settings(config: Path | None, **overrides: object) -> ApiSettings:
    from pydantic import ValidationError

    from api.rest.settings import ApiSettings

    if config is not None and not config.is_file():
        raise SettingsInvalid(f"settings file {config} does not exist")
    try:
        return ApiSettings.load(config, **overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "settings"
        raise SettingsInvalid(f"invalid settings: {field}: {first['msg']}") from None


def _require_sqlite_file(url: str) -> None:
    from api.cli.common import check_database_url

    check_database_url(url)
    if url.startswith("sqlite:///") and ":memory:" not in url:
        path = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
        if not path.is_file():
            raise DatabaseMissing(
                f"no ledger database at {path}: run 'secure-fed demo' first, or set "
                "SECURE_FED_DATABASE_URL"
            )


@api_app.callback()
def serve(
    ctx: typer.Context,
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Listen address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default 8000).")] = None,
    workers: Annotated[int | None, typer.Option(help="uvicorn worker processes.")] = None,
) -> None:
    """Serve the REST API (without a sub-command); see docs/api.md."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = config
        return
    overrides = {
        k: v
        for k, v in (("api_host", host), ("api_port", port), ("api_workers", workers))
        if v is not None
    }
    settings = _settings(config, **overrides)
    _require_sqlite_file(settings.resolved_database_url())
    from api.cli.common import ensure_port_free
    from api.rest.context import build_context

    ensure_port_free(settings.api_host, settings.api_port)  # before keys load or schema moves

    build_context(settings).close()  # keys load, schema migrates: fail here, once
    _serve(settings, config)


def _serve(settings: ApiSettings, config: Path | None) -> None:
    import uvicorn

    env = os.environ
    if config is not None:
        env["SECURE_FED_API_CONFIG"] = str(config.resolve())
    if settings.api_session_secret is None:
        env["SECURE_FED_API_SESSION_SECRET"] = secrets.token_urlsafe(32)
    for name, value in (
        ("SECURE_FED_API_HOST", settings.api_host),
        ("SECURE_FED_API_PORT", str(settings.api_port)),
        ("SECURE_FED_API_WORKERS", str(settings.api_workers)),
    ):
        env[name] = value
    if settings.api_workers > 1 and "PROMETHEUS_MULTIPROC_DIR" not in env:
        env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="secure-fed-metrics-")
    scheme = "https" if settings.api_tls_certfile else "http"
    typer.echo(
        f"serving {settings.resolved_database_url()} at "
        f"{scheme}://{settings.api_host}:{settings.api_port} ({settings.api_workers} workers)",
        err=True,
    )
    uvicorn.run(
        "api.rest.serve:app_from_env",
        factory=True,
        host=settings.api_host,
        port=settings.api_port,
        workers=settings.api_workers,
        ssl_certfile=None if settings.api_tls_certfile is None else str(settings.api_tls_certfile),
        ssl_keyfile=None if settings.api_tls_keyfile is None else str(settings.api_tls_keyfile),
        server_header=False,
        proxy_headers=False,
        log_level="info",
    )


def _store(config: Path | None, db: str | None, *, migrate: bool) -> ApiTokenStore:
    settings = _settings(config)
    url = db if db is not None else settings.resolved_database_url()
    _require_sqlite_file(url)
    from privacy_ledger.api_tokens import ApiTokenStore
    from privacy_ledger.db import create_ledger_engine, current_revision, head_revision, upgrade
    from privacy_ledger.errors import SchemaOutdated

    engine = create_ledger_engine(url)
    if migrate:
        upgrade(engine)
    elif current_revision(engine) != head_revision():
        raise SchemaOutdated(f"database {url} is not at schema {head_revision()}: no tokens yet")
    return ApiTokenStore(engine)


def _row(token: ApiToken) -> dict[str, object]:
    now = time.time()
    state = "revoked" if token.revoked_at else ("expired" if token.expires_at <= now else "valid")
    return {
        "id": token.id,
        "name": token.name,
        "role": token.role,
        "participant": token.participant_id,
        "scopes": list(token.scopes),
        "state": state,
        "expires": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(token.expires_at)),
        "replaced_by": token.replaced_by,
    }


@token_app.command("create", cls=CliCommand)
def create(
    role: Annotated[str, typer.Option(help="participant, officer, admin or service.")],
    name: Annotated[str, typer.Option(help="Who holds the token (a label).")],
    participant: Annotated[
        str | None, typer.Option(metavar="ID", help="Participant id (role participant only).")
    ] = None,
    scope: Annotated[
        list[str] | None,
        typer.Option(help="Narrow the role to these permissions (e.g. budgets:read); repeat."),
    ] = None,
    ttl_days: Annotated[float, typer.Option(help="Days until the token expires.")] = 90.0,
    config: ConfigOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a token and print its secret (shown once; only a salted hash is stored)."""
    store = _store(config, db, migrate=True)
    issued = store.create(
        name=name,
        role=role,
        participant_id=participant,
        scopes=scope or (),
        ttl_seconds=ttl_days * 86400.0,
    )
    if as_json:
        typer.echo(json.dumps({**_row(issued.token), "token": issued.secret}))
        return
    typer.echo(issued.secret)
    typer.echo(
        f"token {issued.token.id} ({role}) created; the secret above is shown only once", err=True
    )


@token_app.command("list", cls=CliCommand)
def list_tokens(
    config: ConfigOption = None, db: DbOption = None, as_json: JsonOption = False
) -> None:
    """List tokens (ids, roles, state; never secrets)."""
    rows = [_row(t) for t in _store(config, db, migrate=False).list()]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for r in rows:
        who = f" participant={r['participant']}" if r["participant"] else ""
        typer.echo(f"{r['id']}  {r['role']:<11} {r['state']:<8} {r['expires']}  {r['name']}{who}")


@token_app.command("revoke", cls=CliCommand)
def revoke(
    token_id: Annotated[str, typer.Argument(metavar="TOKEN_ID")],
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Revoke a token: every worker refuses it from the next request on."""
    token = _store(config, db, migrate=False).revoke(token_id)
    typer.echo(f"token {token.id} revoked")


@token_app.command("rotate", cls=CliCommand)
def rotate(
    token_id: Annotated[str, typer.Argument(metavar="TOKEN_ID")],
    ttl_days: Annotated[float, typer.Option(help="Days until the new token expires.")] = 90.0,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Replace a token by a new one (same name, role, scopes); the old one is revoked."""
    issued = _store(config, db, migrate=False).rotate(token_id, ttl_seconds=ttl_days * 86400.0)
    typer.echo(issued.secret)
    typer.echo(f"token {token_id} revoked, replaced by {issued.token.id}", err=True)
