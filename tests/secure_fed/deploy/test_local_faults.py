"""One process of ``deploy local`` fails during the run: the error, the rounds, the stop order.

The run folder is a real one (:func:`~secure_fed.deploy.local_files.prepare`: keys,
ledger, settings) and the process specs are ``deploy local``'s own; only their
commands are stand-ins (``python -c`` children), so the test takes seconds, not a
federation's minutes. The helper prints its log and is killed outright (``SIGKILL``)
while the run is under way, every time it is restarted, until its restart budget is spent.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import insert

from privacy_ledger.db import create_ledger_engine
from privacy_ledger.models import RoundRow
from secure_fed.deploy.local import RUN, LocalFederation
from secure_fed.deploy.local_files import LocalLayout, LocalOptions
from secure_fed.deploy.supervisor import ProcessFailed, ProcessSpec, RestartPolicy, read_restarts

PY = sys.executable
#: An operator's environment: Python's stdout buffered (the supervisor unbuffers it).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _stand_in(name: str, order: Path, ready: Path) -> list[str]:
    """A service that notes when it is asked to stop (``SIGTERM``)."""
    script = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        f"    open({str(order)!r}, 'a').write({name!r} + '\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(300)\n"
    )
    return [PY, "-c", script]


class StandIns(LocalFederation):
    """``deploy local``'s specs, each command replaced by a stand-in."""

    def _run(self, layout: LocalLayout) -> ProcessSpec:
        spec = super()._run(layout)
        ready = layout.run_dir / "up-run"
        return dataclasses.replace(spec, argv=_stand_in(RUN, layout.run_dir / "order", ready))


def _publish_round_1(url: str) -> None:
    state: dict[str, object] = {"uploads": {"hospital-1": {}, "bank-1": {}}, "excluded": [],
             "publication_sm3": "ab" * 32, "reason": None}  # fmt: skip
    engine = create_ledger_engine(url)
    with engine.begin() as conn:
        row = {"id": "local:00000001", "stage": "published", "state": state}
        conn.execute(insert(RoundRow), [{**row, "created_at": 0.0, "updated_at": 0.0}])
    engine.dispose()


def test_a_helper_killed_mid_run_names_its_log_and_lost_rounds_and_the_driver_stops_first(
    tmp_path: Path,
) -> None:
    options = LocalOptions(participants=2, mode="shares", rounds=3, run_dir=tmp_path / "run")
    federation = StandIns(options=options, python=PY, env=ENV)
    layout = federation.prepare()
    _publish_round_1(layout.database_url)
    order, run = layout.run_dir / "order", layout.run_dir
    dying = (
        "import os, signal, time\n"
        "for i in range(30): print('helper: served request', i)\n"
        "time.sleep(2)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    real = {s.name: s for s in federation.services()}
    assert real["helper"].restart is not None  # deploy local restarts it: a budget of one here
    budget = RestartPolicy(max_restarts=1, initial_delay=0.1)
    helper = dataclasses.replace(
        real["helper"], argv=[PY, "-c", dying], ready=None, env=ENV, restart=budget
    )
    specs = [helper]
    for name in ("superlink", f"supernode-{layout.ids[0]}"):
        up = run / f"up-{name}"
        specs.append(
            dataclasses.replace(
                real[name], argv=_stand_in(name, order, up), ready=up.exists, env=ENV
            )
        )
    supervisor = federation.supervisor
    assert supervisor is not None
    try:
        for spec in specs:
            supervisor.start(spec)
        with pytest.raises(ProcessFailed) as failed:
            federation.run(timeout=60)
        # the run and the SuperLink (the ServerApp's) were stopped before the error was raised
        assert order.read_text().split() == [RUN, "superlink"]
    finally:
        federation.stop()
    assert order.read_text().split() == [RUN, "superlink", f"supernode-{layout.ids[0]}"]
    error = failed.value
    assert error.process == "helper" and error.status == -signal.SIGKILL
    assert error.rounds == ("round 2: never opened", "round 3: never opened")
    first = error.message.splitlines()[0]
    assert first.startswith(
        "helper killed by SIGKILL while it should be running, after 1 restart within 600 s "
        "(its restart budget); "
    )
    assert [(r.process, r.exit, r.attempt) for r in read_restarts(run)] == [
        ("helper", "killed by SIGKILL", 1)
    ]
    assert "rounds not published: round 2: never opened; round 3: never opened" in first
    assert error.tail.splitlines()[-1] == "helper: served request 29"
    assert len(error.tail.splitlines()) == 20


def test_a_stop_stops_the_run_and_the_superlink_before_the_nodes_and_parties(
    tmp_path: Path,
) -> None:
    # Ctrl-C: with the nodes gone first, the ServerApp would open rounds that abort at once
    options = LocalOptions(participants=2, mode="shares", rounds=1, run_dir=tmp_path / "run")
    federation = StandIns(options=options, python=PY, env=ENV)
    layout = federation.prepare()
    order, run = layout.run_dir / "order", layout.run_dir
    supervisor = federation.supervisor
    assert supervisor is not None
    names = ["keyauthority", "helper", "superlink", *(f"supernode-{p}" for p in layout.ids)]
    real = {s.name: s for s in federation.services()}
    try:
        for name in names:
            up = run / f"up-{name}"
            argv = _stand_in(name, order, up)
            supervisor.start(dataclasses.replace(real[name], argv=argv, ready=up.exists, env=ENV))
        supervisor.start(federation._run(layout))
        end = time.monotonic() + 30
        while not (run / "up-run").exists() and time.monotonic() < end:
            time.sleep(0.1)  # until it listens for SIGTERM
    finally:
        federation.stop()
    stopped = order.read_text().split()
    assert stopped[:2] == [RUN, "superlink"], stopped
    assert stopped[2:] == [*reversed(names[3:]), "helper", "keyauthority"], stopped
