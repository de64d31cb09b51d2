"""A real ``secure-fed api`` process on 127.0.0.1 over a seeded ledger, for the browser tests."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from api.rest.context import AppContext, build_context
from tests.api.rest.console.webdriver import free_port, wait_http
from tests.api.rest.helpers import seed, settings_for


@dataclass
class Live:
    """The served ledger: base URL, tokens, and the test's own context on the same database."""

    base: str
    officer: str
    participant: str
    ctx: AppContext
    log: Path


def _toml(values: dict[str, object]) -> str:
    lines = []
    for key, value in values.items():
        if value is None:
            continue
        text = value.get_secret_value() if hasattr(value, "get_secret_value") else value
        lines.append(f"{key} = {json.dumps(str(text))}")
    return "\n".join(lines) + "\n"


@contextmanager
def live_service(db_url: str, folder: Path) -> Iterator[Live]:
    """Seed ``db_url``, serve it with ``secure-fed api --config`` and yield the URL."""
    settings = settings_for(db_url, folder)
    ctx = build_context(settings)
    seed(ctx)
    officer = ctx.tokens.create(name="browser-officer", role="officer", participant_id=None)
    participant = ctx.tokens.create(
        name="browser-participant", role="participant", participant_id="hospital-1"
    )
    config = folder / "api.toml"
    keys = (
        "database_url",
        "api_audit_key_file",
        "api_report_key_file",
        "api_log_public_key_file",
        "api_session_secret",
        "api_audit_origin",
    )
    config.write_text(_toml({k: getattr(settings, k) for k in keys}), encoding="utf-8")
    port = free_port()
    log = folder / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from api.cli import main; main()",
                "api",
                "--config",
                str(config),
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/healthz", seconds=60)
        yield Live(
            base=base, officer=officer.secret, participant=participant.secret, ctx=ctx, log=log
        )
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        ctx.close()
