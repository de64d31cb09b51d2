"""``secure-fed deploy local`` as a user runs it: Ctrl-C stops every process; a run's result.

The command starts the key ceremony, the key authority, the helper (shares
mode), the API, the SuperLink and the SuperNodes, then the run; a ``SIGINT``
sent as soon as the services are up must stop all of them -- every process
that descended from the command, including Flower's own sub-processes --
and the command must exit 130. A ckks run to its end prints its result on standard
output, and the recomputation it names passes on the run folder.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from tests.api.cli.test_ledger_recompute import _alter_decryption, _alter_upload
from tests.e2e.procs import descendants, survivors, wait_for_text

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-c", "from api.cli import main; main()"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}
runner = CliRunner()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_process_of_the_federation(tmp_path: Path, signum: int) -> None:
    err = tmp_path / "stderr.txt"
    run_dir = tmp_path / "run"
    with err.open("wb") as sink:
        command = subprocess.Popen(
            [*CLI, "deploy", "local", "--participants", "2", "--mode", "shares",
             "--rounds", "1", "--run-dir", str(run_dir)],
            env=ENV, stdout=sink, stderr=sink, cwd=tmp_path,
        )  # fmt: skip
        try:
            wait_for_text(err, "services up", timeout=300, proc=command)
            tree = descendants(command.pid)
            logs = {p.name for p in (run_dir / "logs").iterdir()}
            assert {"keyauthority.log", "helper.log", "api.log", "superlink.log"} <= logs
            assert {"supernode-hospital-1.log", "supernode-bank-1.log"} <= logs
            assert len(tree) >= 6, tree
            command.send_signal(signum)
            status = command.wait(timeout=120)
        finally:
            if command.poll() is None:
                command.kill()
    assert status == (130 if signum == signal.SIGINT else 143), err.read_text()
    assert not survivors(tree), (survivors(tree), err.read_text())
    assert "stopping every process" in err.read_text()


def _printed_command(stdout: str, label: str, run: Path) -> list[str]:
    """The command printed under ``label:`` in the result, continuations joined, ``$RUN`` set."""
    lines = stdout.splitlines()
    start = lines.index(f"{label}:") + 1
    words: list[str] = []
    for line in lines[start:]:
        words += [w.replace("$RUN", str(run)) for w in shlex.split(line.removesuffix(" \\"))]
        if not line.endswith(" \\"):
            break
    assert words[0] == "secure-fed", words
    return words[1:]


@pytest.mark.timeout(1800)
def test_a_ckks_run_prints_its_result_and_every_decryption_recomputes(tmp_path: Path) -> None:
    """The result on stdout (100 columns), progress on stderr; the printed recompute passes,
    and names an altered upload; an altered decryption record fails the authority's log."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [*CLI, "deploy", "local", "--participants", "2", "--mode", "ckks", "--rounds", "1",
         "--exit", "--run-dir", str(run_dir)],
        env=ENV, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=1700,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr[-6000:])
    out = done.stdout
    assert out.startswith(f"run {run_dir}: 1 of 1 rounds published"), out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    assert re.search(
        r"^1 +published +published [0-9a-f]{16}\.\.\.; uploaded: bank-1, hospital-1;", out, re.M
    ), out
    assert re.search(r"^keyauthority +log   logs/keyauthority\.log$", out, re.M), out
    assert "services up" in done.stderr and "services up" not in out
    assert f"    RUN={run_dir}" in out.splitlines(), out
    assert "{" not in out, out  # no Python dict any more
    for label in ("recompute every scoring decryption", "recompute every publication decryption"):
        result = runner.invoke(app, _printed_command(out, label, run_dir))
        assert result.exit_code == 0 and "all match" in result.output, result.output
        assert "the key authority's audit log: sqlite:///" in result.output
    scoring = _printed_command(out, "recompute every scoring decryption", run_dir)
    url = scoring[scoring.index("--db") + 1]
    _alter_upload(url)
    result = runner.invoke(app, scoring)
    assert result.exit_code == 1, result.output
    assert "MISMATCH: round 1, purpose " in result.output, result.output
    assert "CLI_RECOMPUTE_MISMATCH" in result.output
    index = _alter_decryption(f"sqlite:///{run_dir / 'keyauthority' / 'audit.db'}")
    publication = _printed_command(out, "recompute every publication decryption", run_dir)
    result = runner.invoke(app, publication)
    assert result.exit_code == 1, result.output
    assert f"first bad entry: {index}" in result.output, result.output
