"""From a fresh ``secure-fed demo``: export all three formats, verify the bundle, run the checklist.

Everything goes through the installed ``secure-fed`` command, as an officer
would use it; the demo's log key signs the report here because the demo has
no separate officer key.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from pypdf import PdfReader

from privacy_ledger import PrivacyLedger

pytestmark = pytest.mark.slow


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SECURE_FED_ENVIRONMENT": "development"}
    done = subprocess.run(
        ["secure-fed", *args], capture_output=True, text=True, env=env, timeout=900, check=False
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "run"
    cli(
        "demo",
        "--rounds",
        "1",
        "--participants",
        "2",
        "--mode",
        "plaintext",
        "--out",
        str(out),
        "--json",
    )
    return out


def test_demo_exports_every_format_and_the_bundle_verifies(demo: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{demo / 'ledger.db'}"
    key, pub = demo / "log-signing-key.pem", demo / "log-public-key.pem"
    for fmt in ("json", "html", "pdf"):
        cli(
            "audit",
            "export",
            "--format",
            fmt,
            "--out",
            str(tmp_path / f"report.{fmt}"),
            "--db",
            db,
            "--signing-key",
            str(key),
            "--log-public-key",
            str(pub),
        )
    verified = cli(
        "audit",
        "verify",
        str(tmp_path / "report.json"),
        "--public-key",
        str(pub),
        "--log-public-key",
        str(pub),
        "--json",
    )
    summary = json.loads(verified.stdout)
    assert summary["ok"] is True and summary["entries"] > 0
    bundle = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    filed = {r["participant"]: r["epsilon_spent"] for r in bundle["dp_filing"]}
    assert len(filed) == 2
    ledger = PrivacyLedger.from_url(db, create=False)
    try:
        for participant, eps in filed.items():
            assert eps == str(ledger.budget_status(participant, "private-train").spent)
    finally:
        ledger.engine.dispose()
    text = " ".join(p.extract_text() for p in PdfReader(tmp_path / "report.pdf").pages)
    assert all(eps in " ".join(text.split()) for eps in filed.values())
    assert all(
        eps in (tmp_path / "report.html").read_text(encoding="utf-8") for eps in filed.values()
    )


def test_tampered_bundle_exits_one_naming_the_failure(demo: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{demo / 'ledger.db'}"
    out = tmp_path / "b.json"
    cli(
        "audit",
        "export",
        "--format",
        "json",
        "--out",
        str(out),
        "--db",
        db,
        "--signing-key",
        str(demo / "log-signing-key.pem"),
    )
    out.write_bytes(out.read_bytes().replace(b'"action":"keep"', b'"action":"drop"', 1))
    failed = cli("audit", "verify", str(out), check=False)
    assert failed.returncode == 1
    assert "FAILED [COMPLIANCE_BUNDLE_SIGNATURE_INVALID]" in failed.stderr
    assert "FAILED [COMPLIANCE_BUNDLE_CONTENT_MISMATCH] section outlier_decisions" in failed.stderr


def test_checklist_runs_on_the_demo(demo: Path) -> None:
    done = cli(
        "audit", "checklist", "--db", f"sqlite:///{demo / 'ledger.db'}", "--json", check=False
    )
    assert done.returncode == 1  # a demo is not a production deployment
    items = {i["id"]: i for i in json.loads(done.stdout)["items"]}
    assert items["ledger.verifies"]["status"] == "pass"
    assert items["budgets.every_participant"]["status"] == "pass"
    assert items["log.signing_key_not_on_database_host"]["status"] == "fail"
    assert "log-signing-key.pem" in items["log.signing_key_not_on_database_host"]["reason"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_api_serves_the_demo_ledger_with_no_configuration(demo: Path, tmp_path: Path) -> None:
    """``secure-fed api`` run where the demo left ``secure-fed-work/demo``, no config file."""
    (tmp_path / "secure-fed-work").mkdir()
    (tmp_path / "secure-fed-work" / "demo").symlink_to(demo, target_is_directory=True)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
    env["SECURE_FED_API_PORT"] = str(port)
    made = subprocess.run(
        ["secure-fed", "api", "token", "create", "--role", "officer", "--name", "officer"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    server = subprocess.Popen(
        ["secure-fed", "api"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if server.poll() is not None:
                pytest.fail(server.stderr.read().decode() if server.stderr else "server exited")
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        auth = {"Authorization": f"Bearer {token}"}
        budgets = httpx.get(f"{base}/v1/budgets", headers=auth, timeout=30)
        assert budgets.status_code == 200, budgets.text
        ledger = PrivacyLedger.from_url(f"sqlite:///{demo / 'ledger.db'}", create=False)
        try:
            served = {b["participant_id"]: b for b in budgets.json()["budgets"]}
            assert len(served) == 2
            for participant, row in served.items():
                status = ledger.budget_status(participant, row["asset_id"])
                assert row["spent"] == str(status.spent)
        finally:
            ledger.engine.dispose()
        assert httpx.get(f"{base}/v1/budgets", timeout=30).status_code == 401
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
