"""After ``secure-fed deploy local --mode ckks``, the officer sees the key authority's decryptions.

A real run (two participants, one round) of the command as a user runs it; once the
round is published, with the services still up, the console's round page and the
report export of the run's own ``secure-fed api`` (HTTPS over loopback, the run's CA)
show the decryptions the key authority recorded in its own audit log, and so does
``secure-fed audit export`` with no flag beyond ``--db``. No setting names the party
logs: both find them in the run folder.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from privacy_ledger import create_ledger_engine
from privacy_ledger.api_tokens import ApiTokenStore
from tests.api.rest.console.pages import parse
from tests.e2e.procs import wait_for_text

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-c", "from api.cli import main; main()"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
ROUND = "local:00000001"


def _officer(run: Path) -> str:
    engine = create_ledger_engine(f"sqlite:///{run / 'ledger.db'}")
    try:
        return ApiTokenStore(engine).create(name="e2e officer", role="officer").secret
    finally:
        engine.dispose()


def _check_console(api: str, run: Path) -> None:
    headers = {"Authorization": f"Bearer {_officer(run)}"}
    with httpx.Client(verify=str(run / "keys" / "tls" / "ca.pem"), timeout=120.0) as client:
        page = parse(client.get(f"{api}/console/rounds/{ROUND}", headers=headers).text)
        rows = page.body_rows("Decryptions and refusals of this round recorded by the key")
        released = [r for r in rows if r[3] == "decryption.released"]
        assert released, page.html
        assert all(r[2] == "key authority" for r in rows)
        assert {r[6] for r in released} >= {"score", "aggregate"}
        assert any(r[5] == "aggregator" for r in released)
        assert "verified" in " ".join(page.texts["party-status"])
        report = client.get(f"{api}/v1/reports/export?format=html", headers=headers)
        assert report.status_code == 200, report.text
        assert "key authority (own log)" in report.text
        assert "decryption.released" in report.text


def test_the_console_and_the_report_show_the_key_authority_s_decryptions(tmp_path: Path) -> None:
    err, run = tmp_path / "stderr.txt", tmp_path / "run"
    with err.open("wb") as sink:
        command = subprocess.Popen(
            [*CLI, "deploy", "local", "--participants", "2", "--mode", "ckks",
             "--rounds", "1", "--run-dir", str(run)],
            env=ENV, stdout=sink, stderr=sink, cwd=tmp_path,
        )  # fmt: skip
        try:
            wait_for_text(err, "rounds published", timeout=1200, proc=command)  # stdout's report
            text = err.read_text()
            assert "1 of 1 rounds published" in text, text
            found = re.search(r"API (https://127\.0\.0\.1:\d+)", text)
            assert found, text
            _check_console(found.group(1), run)
            out = tmp_path / "report.html"
            export = subprocess.run(
                [*CLI, "audit", "export", "--db", f"sqlite:///{run / 'ledger.db'}",
                 "--format", "html", "--out", str(out)],
                env=ENV, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            assert export.returncode == 0, export.stdout + export.stderr
            assert "party audit logs included: key_authority" in export.stdout
            assert "key authority (own log)" in out.read_text()
            command.send_signal(signal.SIGINT)
            command.wait(timeout=120)
        finally:
            if command.poll() is None:
                command.kill()
