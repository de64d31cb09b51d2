"""``secure-fed deploy local --resume``: a run whose driver was killed is taken up and finishes.

A shares run of 2 participants and 2 rounds is started; once round 1 published, the
driver (``deploy local`` itself) is killed outright and whatever it started is gone, as
after a reboot. ``deploy local --resume RUN_DIR --exit`` then starts every process again
on the directory's keys, state and ledger, without a new key ceremony, and runs what is
left: the ledger ends with one publication per configured round, round 1's the same as
before, the round ids continuing after the earlier ones, and nothing left running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from secure_fed.deploy.local_report import RoundSummary, round_summaries
from tests.e2e.procs import descendants, survivors, wait_for_text

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-c", "from api.cli import main; main()"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}


def _rounds(run_dir: Path) -> tuple[RoundSummary, ...]:
    try:
        return round_summaries(f"sqlite:///{run_dir / 'ledger.db'}")
    except Exception:  # noqa: BLE001 - the ledger may not exist yet
        return ()


def _wait_published(run_dir: Path, command: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.stage == "published" for r in _rounds(run_dir)):
            return
        assert command.poll() is None, "deploy local ended before round 1 published"
        time.sleep(1.0)
    raise AssertionError(f"round 1 did not publish in {timeout} s")


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.mark.timeout(2400)
def test_a_killed_driver_is_resumed_and_the_remaining_round_publishes(tmp_path: Path) -> None:
    run_dir, err = tmp_path / "run", tmp_path / "stderr-1.txt"
    with err.open("wb") as sink:
        first = subprocess.Popen(
            [*CLI, "deploy", "local", "--participants", "2", "--mode", "shares",
             "--rounds", "2", "--run-dir", str(run_dir)],
            env=ENV, stdout=sink, stderr=sink, cwd=tmp_path,
        )  # fmt: skip
        tree: set[int] = set()
        try:
            wait_for_text(err, "services up", timeout=300, proc=first)
            tree = descendants(first.pid)
            _wait_published(run_dir, first, timeout=900)
            tree |= descendants(first.pid)
            first.send_signal(signal.SIGKILL)  # the driver dies outright
            first.wait(timeout=60)
        finally:
            if first.poll() is None:
                first.kill()
            for pid in survivors(tree, timeout=60):  # what it started: gone, as after a reboot
                os.kill(pid, signal.SIGKILL)
    assert not survivors(tree, timeout=30)
    before = _rounds(run_dir)
    published = [r for r in before if r.stage == "published"]
    assert [r.round_id for r in published] == [1], before
    keys = _files(run_dir / "keys")

    out, err2 = tmp_path / "stdout-2.txt", tmp_path / "stderr-2.txt"
    with out.open("wb") as out_sink, err2.open("wb") as sink:
        second = subprocess.Popen(
            [*CLI, "deploy", "local", "--resume", str(run_dir), "--exit"],
            env=ENV, stdout=out_sink, stderr=sink, cwd=tmp_path,
        )  # fmt: skip
        try:
            wait_for_text(err2, "services up", timeout=600, proc=second)
            tree = descendants(second.pid)
            status = second.wait(timeout=1800)
        finally:
            if second.poll() is None:
                second.kill()
    text, result = err2.read_text(), out.read_text()
    assert status == 0, (status, text[-6000:], result)
    assert "resuming" in text and "key ceremony" not in text, text[-3000:]
    assert result.startswith("2 of 2 rounds published"), result
    after = _rounds(run_dir)
    ids = [r.round_id for r in after]
    assert ids == sorted(set(ids)) and max(ids) > max(r.round_id for r in before), after
    done = [r for r in after if r.stage == "published"]
    assert len(done) == 2, after  # one publication per configured round
    assert done[0] == published[0]  # round 1's publication, untouched
    assert done[1].round_id > max(r.round_id for r in before), after
    assert set(done[1].roster) == {"hospital-1", "bank-1"}, after
    assert all(r.stage in ("published", "aborted") for r in after), after
    assert _files(run_dir / "keys") == keys  # no new ceremony: no key file touched
    assert not survivors(tree), (survivors(tree), text[-3000:])
