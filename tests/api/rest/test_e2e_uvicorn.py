"""End to end: ``secure-fed api`` under uvicorn (2 workers) on 127.0.0.1 over PostgreSQL.

Tokens are made and revoked with the real command line while the server
runs; the revocation is refused by every worker on the next request, with no
restart; the denial is in the database's audit log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.rest.context import build_context
from tests.api.rest.helpers import PARTICIPANTS, denials, seed, settings_for

CLI = [sys.executable, "-c", "from api.cli import main; main()"]
pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cli(*args: str, config: Path) -> str:
    done = subprocess.run(
        [*CLI, "api", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def server(pg_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    settings = settings_for(pg_url, tmp_path)
    ctx = build_context(settings)
    seed(ctx)
    ctx.close()
    port = _free_port()
    config = tmp_path / "api.toml"
    config.write_text(
        f'database_url = "{pg_url}"\n'
        f'api_audit_key_file = "{tmp_path / "log-signing-key.pem"}"\n'
        f"api_port = {port}\napi_workers = 2\n"
        f'api_session_secret = "{"k" * 40}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    proc = subprocess.Popen(
        [*CLI, "api", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "server.log", "wb"),  # noqa: SIM115
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                pytest.fail((tmp_path / "server.log").read_text())
            time.sleep(0.1)
        else:
            pytest.fail("server did not become ready")
        yield base, config
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_real_server_serves_refuses_and_revokes_without_restart(
    server: tuple[str, Path], pg_url: str, tmp_path: Path
) -> None:
    base, config = server
    officer = _cli("token", "create", "--role", "officer", "--name", "e2e", config=config)
    own = _cli(
        "token",
        "create",
        "--role",
        "participant",
        "--participant",
        PARTICIPANTS[0],
        "--name",
        "h1",
        config=config,
    )
    with httpx.Client(base_url=base, timeout=30) as client:
        auth = {"Authorization": f"Bearer {officer}"}
        budgets = client.get("/v1/budgets", headers=auth)
        assert budgets.status_code == 200
        assert {b["participant_id"] for b in budgets.json()["budgets"]} == set(PARTICIPANTS)
        head = client.get("/v1/audit/head", headers=auth).json()
        assert head["checkpoint"].startswith("secure-fed-test/api\n")
        other = client.get(
            f"/v1/budgets/{PARTICIPANTS[1]}", headers={"Authorization": f"Bearer {own}"}
        )
        assert other.status_code == 403
        assert other.headers["content-type"] == "application/problem+json"
        token_id = officer.removeprefix("sft_").split(".")[0]
        _cli("token", "revoke", token_id, config=config)
        for _ in range(6):  # several requests: both workers must refuse it
            answer = client.get("/v1/budgets", headers=auth)
            assert answer.status_code == 401
            assert answer.json()["code"] == "API_UNAUTHENTICATED"
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {own}"})
        assert metrics.status_code == 403
    ctx = build_context(settings_for(pg_url, tmp_path))
    try:
        found = denials(ctx)
    finally:
        ctx.close()
    assert sum(1 for d in found if d["reason"] == "LEDGER_TOKEN_REVOKED") == 6
    assert any(d["reason"] == "API_OTHER_PARTICIPANT" for d in found)
