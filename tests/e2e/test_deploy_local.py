"""``secure-fed deploy local`` as a user runs it: Ctrl-C in the middle stops every process.

The command starts the key ceremony, the key authority, the helper (shares
mode), the API, the SuperLink and the SuperNodes, then the run; a ``SIGINT``
sent as soon as the services are up must stop all of them -- every process
that descended from the command, including Flower's own sub-processes --
and the command must exit 130.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.procs import descendants, survivors, wait_for_text

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-c", "from api.cli import main; main()"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}


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
