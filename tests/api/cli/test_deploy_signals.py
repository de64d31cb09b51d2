"""A stop signal that lands while a child is forked is not lost.

Python runs a signal handler that fires inside an at-fork callback there and
drops its exception ("Exception ignored"), so ``secure-fed deploy local`` once
ran its round to the end after Ctrl-C and then waited for another. The command
keeps every caught signal and raises it again while it waits for the run.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from api.cli.deploy import Stopped, _stop_on_signals
from secure_fed.deploy.supervisor import ProcessSpec, Supervisor

ENV = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_swallowed_stop_signal_is_raised_again_by_the_check(signum: int) -> None:
    with _stop_on_signals() as stopped:
        stopped()  # nothing caught yet
        try:  # where the at-fork callback would have dropped it
            signal.raise_signal(signum)
        except Stopped:
            pass
        with pytest.raises(Stopped, match=signal.Signals(signum).name):
            stopped()
    assert signal.getsignal(signum) is not None  # the previous handler is back


def test_waiting_for_a_job_stops_when_the_poll_raises(tmp_path: Path) -> None:
    spec = ProcessSpec(
        name="long", argv=[sys.executable, "-c", "import time; time.sleep(60)"], env=ENV
    )
    calls: list[int] = []

    def poll() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise Stopped("SIGINT")

    with Supervisor(run_dir=tmp_path) as sup:
        child = sup.start(spec)
        with pytest.raises(Stopped):
            sup.wait("long", poll=poll)
        assert child.alive()  # the caller decides what to stop
    assert len(calls) == 2 and not child.alive()
