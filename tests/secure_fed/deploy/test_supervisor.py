"""The process supervisor over real processes: health checks, failures, and nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from secure_fed.deploy.supervisor import (
    ProcessFailed,
    ProcessNotReady,
    ProcessSpec,
    Restart,
    RestartPolicy,
    Supervisor,
    free_port,
    http_ready,
    read_restarts,
    tcp_ready,
)

PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_FED_")}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, timeout: float = 15.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _http_server(port: int) -> ProcessSpec:
    return ProcessSpec(
        name="web",
        argv=[PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        env=ENV,
        ready=http_ready(f"http://127.0.0.1:{port}/"),
        ready_timeout=30,
    )


def test_a_service_is_started_when_healthy_and_logs_to_its_own_file(tmp_path: Path) -> None:
    port = free_port()
    with Supervisor(run_dir=tmp_path) as sup:
        child = sup.start(_http_server(port))
        assert tcp_ready("127.0.0.1", port)()
        assert child.alive() and child.log_path == tmp_path / "logs" / "web.log"
        sup.check()
    assert not child.alive()
    assert not tcp_ready("127.0.0.1", port)()
    assert "GET / HTTP" in (tmp_path / "logs" / "web.log").read_text()


def test_a_process_that_dies_before_it_is_ready_is_a_typed_error_with_its_log(
    tmp_path: Path,
) -> None:
    spec = ProcessSpec(
        name="broken",
        argv=[PY, "-c", "import sys; print('bad config: port'); sys.exit(3)"],
        env=ENV,
        ready=tcp_ready("127.0.0.1", free_port()),
    )
    with Supervisor(run_dir=tmp_path) as sup, pytest.raises(ProcessFailed, match="bad config"):
        sup.start(spec)


def test_a_process_never_ready_is_not_ready_and_is_stopped(tmp_path: Path) -> None:
    spec = ProcessSpec(
        name="silent",
        argv=[PY, "-c", "import time; time.sleep(60)"],
        env=ENV,
        ready=tcp_ready("127.0.0.1", free_port()),
        ready_timeout=1.0,
    )
    sup = Supervisor(run_dir=tmp_path)
    with pytest.raises(ProcessNotReady, match="silent"):
        sup.start(spec)
    pid = sup.children["silent"].pid
    sup.stop_all()
    assert _wait_gone(pid)


def test_a_dead_service_is_reported_by_check(tmp_path: Path) -> None:
    with Supervisor(run_dir=tmp_path) as sup:
        sup.start(ProcessSpec(name="short", argv=[PY, "-c", "print('bye')"], env=ENV))
        sup.children["short"].process.wait(timeout=30)
        with pytest.raises(ProcessFailed, match="short exited with 0"):
            sup.check()


def test_stop_reaches_grandchildren_and_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "g = subprocess.Popen([sys.executable, '-c', "
        "'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
        "time.sleep(300)\n"
    )
    sup = Supervisor(run_dir=tmp_path, stop_timeout=1.0)
    sup.start(ProcessSpec(name="stubborn", argv=[PY, "-c", script], env=ENV, ready=pid_file.exists))
    grandchild = int(pid_file.read_text())
    parent = sup.children["stubborn"].pid
    sup.stop_all()
    assert _wait_gone(parent) and _wait_gone(grandchild)


def test_children_die_with_a_killed_supervisor(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from secure_fed.deploy.supervisor import ProcessSpec, Supervisor\n"
        f"sup = Supervisor(run_dir=Path({str(tmp_path)!r}))\n"
        "spec = ProcessSpec(name='sleeper', argv=['sleep', '300'], env=dict(os.environ))\n"
        "child = sup.start(spec)\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(300)\n"
    )
    boss = subprocess.Popen([PY, "-c", script], env=ENV, cwd=Path(__file__).parents[3])
    try:
        end = time.monotonic() + 60
        while not pid_file.exists() and time.monotonic() < end:
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert _alive(child)
        boss.send_signal(signal.SIGKILL)
        boss.wait(timeout=30)
        assert _wait_gone(child)
    finally:
        if boss.poll() is None:
            boss.kill()


def test_a_name_in_use_is_refused(tmp_path: Path) -> None:
    port = free_port()
    with Supervisor(run_dir=tmp_path) as sup:
        sup.start(_http_server(port))
        with pytest.raises(ProcessFailed, match="already running"):
            sup.start(_http_server(port))


def test_a_child_stopped_or_killed_on_purpose_is_not_a_failure(tmp_path: Path) -> None:
    with Supervisor(run_dir=tmp_path, stop_timeout=5) as sup:
        for name in ("a", "b"):
            sup.start(ProcessSpec(name=name, argv=["sleep", "300"], env=ENV))
        sup.kill("a")
        sup.stop("b")
        sup.check()
        assert not sup.children["a"].alive() and not sup.children["b"].alive()


#: The environment of a Python child as an operator's shell hands it over: buffered stdout.
BUFFERED = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"}


def _dies_after_printing(lines: str) -> str:
    return (
        f"import os, signal, time\n{lines}\ntime.sleep(0.3)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )


def _failure_of(sup: Supervisor, name: str) -> ProcessFailed:
    sup.children[name].process.wait(timeout=30)
    with pytest.raises(ProcessFailed) as failed:
        sup.check()
    return failed.value


def test_a_python_child_killed_outright_leaves_its_last_lines_in_the_error(
    tmp_path: Path,
) -> None:
    script = _dies_after_printing("for i in range(40): print('serving round', i)")
    with Supervisor(run_dir=tmp_path) as sup:
        sup.start(ProcessSpec(name="helper", argv=[PY, "-c", script], env=BUFFERED))
        failed = _failure_of(sup, "helper")
    assert failed.code == "DEPLOY_PROCESS_FAILED"
    assert failed.process == "helper" and failed.status == -signal.SIGKILL
    assert failed.log_path == tmp_path / "logs" / "helper.log"
    lines = failed.tail.splitlines()
    assert lines == [f"serving round {i}" for i in range(20, 40)]  # the last 20, in order
    first, _, rest = failed.message.partition("\n")
    assert first.startswith("helper killed by SIGKILL while it should be running")
    assert f"log {failed.log_path}, last 20 lines quoted" in first
    assert rest == failed.tail


def test_a_log_tail_is_bounded_in_bytes_and_leaves_keys_and_tokens_out(tmp_path: Path) -> None:
    secret = "sft_0123456789abcdef.Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWo"
    pem = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqBHM9VAYItBG0wawIBAQQg\n"
    lines = (
        f"print('x' * 3000); print({pem!r} + '-----END PRIVATE KEY-----')\n"
        f"print('token', {secret!r}); print('path /tmp/secure-fed-local-ab12/logs ok')"
    )
    with Supervisor(run_dir=tmp_path) as sup:
        sup.start(
            ProcessSpec(name="api", argv=[PY, "-c", _dies_after_printing(lines)], env=BUFFERED)
        )
        failed = _failure_of(sup, "api")
    assert len(failed.tail.encode()) <= 4096
    assert "BEGIN PRIVATE KEY" not in failed.tail and "MIGHAgEA" not in failed.tail
    assert "0123456789abcdef" not in failed.tail and "Zm9vYmFy" not in failed.tail
    assert "token [redacted]" in failed.tail
    assert "path /tmp/secure-fed-local-ab12/logs ok" in failed.tail


def test_the_stop_first_children_stop_before_the_others(tmp_path: Path) -> None:
    order = tmp_path / "order"
    script = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        f"    open({str(order)!r}, 'a').write(sys.argv[1] + '\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        f"open({str(tmp_path)!r} + '/up-' + sys.argv[1], 'w').close()\n"
        "time.sleep(300)\n"
    )
    sup = Supervisor(run_dir=tmp_path)
    for name, first in (("keyauthority", False), ("superlink", True), ("node", False)):
        ready = (tmp_path / f"up-{name}").exists
        sup.start(
            ProcessSpec(
                name=name, argv=[PY, "-c", script, name], env=ENV, ready=ready, stop_first=first
            )
        )
    assert sup.stop_order() == ["superlink", "node", "keyauthority"]
    sup.stop_all()
    assert order.read_text().split() == ["superlink", "node", "keyauthority"]


def test_stop_reaches_what_a_child_started_in_a_session_of_its_own_first(tmp_path: Path) -> None:
    # Flower's SuperLink starts its SuperExec (and so the ServerApp) with start_new_session
    order, pid_file = tmp_path / "order", tmp_path / "detached.pid"
    leaf = (
        "import os, signal, sys, time\n"
        "def bye(*_):\n"
        f"    open({str(order)!r}, 'a').write('serverapp\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(300)\n"
    )
    script = (
        "import signal, subprocess, sys, time\n"
        "def bye(*_):\n"
        f"    open({str(order)!r}, 'a').write('superlink\\n'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        f"g = subprocess.Popen([sys.executable, '-c', {leaf!r}], start_new_session=True)\n"
        "time.sleep(300)\n"
    )
    sup = Supervisor(run_dir=tmp_path, stop_timeout=5.0)
    spec = ProcessSpec(name="superlink", argv=[PY, "-c", script], env=ENV, ready=pid_file.exists)
    sup.start(spec)
    detached = int(pid_file.read_text())
    try:
        assert os.getpgid(detached) != sup.children["superlink"].pid
        sup.stop_all()
        assert _wait_gone(detached)
        assert order.read_text().split() == ["serverapp", "superlink"]
    finally:
        if _alive(detached):
            os.kill(detached, signal.SIGKILL)


def test_an_adopting_supervisor_stops_and_reaps_what_a_killed_child_left_behind(
    tmp_path: Path,
) -> None:
    # a SuperLink killed outright leaves its SuperExec and ServerApp (own sessions) running
    pids = tmp_path / "pids"
    child = (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
        " start_new_session=True)\n"
        "q = subprocess.Popen([sys.executable, '-c', 'pass'], start_new_session=True)\n"
        f"open({str(pids)!r}, 'w').write(f'{{g.pid}} {{q.pid}}')\n"
        "time.sleep(300)\n"
    )
    boss = (
        "import json, os, sys, time\n"
        "from pathlib import Path\n"
        "from secure_fed.deploy.supervisor import ProcessSpec, Supervisor\n"
        f"sup = Supervisor(run_dir=Path({str(tmp_path)!r}), stop_timeout=5, adopt_orphans=True)\n"
        f"pids = Path({str(pids)!r})\n"
        f"sup.start(ProcessSpec(name='superlink', argv=[sys.executable, '-c', {child!r}],"
        " env=dict(os.environ), ready=pids.exists))\n"
        "time.sleep(0.5)\n"
        "sup.kill('superlink')\n"
        "time.sleep(1.0)\n"
        "adopted = sorted(sup.orphans())\n"
        "sup.check()\n"
        "sup.stop_all()\n"
        "left = []\n"
        "for e in os.listdir('/proc'):\n"
        "    try:\n"
        "        f = open(f'/proc/{e}/stat').read().rsplit(')', 1)[1].split()\n"
        "    except (OSError, ValueError):\n"
        "        continue\n"
        "    if e.isdigit() and int(f[1]) == os.getpid():\n"
        "        left.append([int(e), f[0]])\n"
        "print(json.dumps({'adopted': adopted, 'left': left}))\n"
    )
    out = subprocess.run(
        [PY, "-c", boss], env=ENV, cwd=Path(__file__).parents[3],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    long_lived, short_lived = map(int, pids.read_text().split())
    try:
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert long_lived in report["adopted"], report  # re-parented to the supervisor
        assert report["left"] == [], report  # nothing running, nothing defunct
        assert not _alive(long_lived) and not _alive(short_lived)
    finally:
        if _alive(long_lived):
            os.kill(long_lived, signal.SIGKILL)


def _check_until(sup: Supervisor, done: object, timeout: float = 60.0) -> None:
    """Call ``sup.check()`` (which restarts) until ``done()`` holds; fail after ``timeout``."""
    end = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < end, "not done in time"
        sup.check()
        time.sleep(0.05)


def test_a_service_that_dies_is_restarted_healthy_and_the_restart_is_recorded(
    tmp_path: Path,
) -> None:
    # the first run serves, then dies; the second takes a second before it listens:
    # the check that restarts it returns only once it answers its health check again
    port, runs = free_port(), tmp_path / "runs"
    script = (
        "import http.server, os, sys, threading, time\n"
        f"first = not os.path.exists({str(runs)!r})\n"
        f"open({str(runs)!r}, 'a').write('run\\n')\n"
        "print('first run' if first else 'second run')\n"
        "if not first: time.sleep(1)\n"
        "handler = http.server.SimpleHTTPRequestHandler\n"
        f"srv = http.server.HTTPServer(('127.0.0.1', {port}), handler)\n"
        "if first: threading.Timer(0.5, lambda: os._exit(3)).start()\n"
        "srv.serve_forever()\n"
    )
    told: list[Restart] = []
    spec = ProcessSpec(
        name="web",
        argv=[PY, "-c", script],
        env=ENV,
        ready=http_ready(f"http://127.0.0.1:{port}/"),
        ready_timeout=30,
        restart=RestartPolicy(max_restarts=5, initial_delay=0.5),
    )
    with Supervisor(run_dir=tmp_path, on_restart=told.append) as sup:
        first = sup.start(spec).pid
        child = sup.children["web"]
        end = time.monotonic() + 60
        while child.pid == first:
            assert time.monotonic() < end, "never restarted"
            sup.check()
            time.sleep(0.05)
        assert http_ready(f"http://127.0.0.1:{port}/")()  # up when check() returned
        assert child.alive() and runs.read_text().split() == ["run", "run"]
        sup.check()  # up: no failure
    (restart,) = read_restarts(tmp_path)
    assert told == [restart]
    assert (restart.process, restart.status, restart.exit) == ("web", 3, "exited with 3")
    assert (restart.attempt, restart.delay, restart.busy) == (1, 0.5, False)
    log = (tmp_path / "logs" / "web.log").read_text()
    assert "first run" in log and "second run" in log  # one log, appended


def test_a_service_that_always_dies_spends_its_budget_and_fails_with_its_log(
    tmp_path: Path,
) -> None:
    spec = ProcessSpec(
        name="crasher",
        argv=[PY, "-c", "print('cannot open the database'); raise SystemExit(4)"],
        env=ENV,
        restart=RestartPolicy(max_restarts=2, initial_delay=0.05),
    )
    with Supervisor(run_dir=tmp_path) as sup:
        sup.start(spec)
        with pytest.raises(ProcessFailed) as failed:
            _check_until(sup, lambda: False)
    error = failed.value
    assert error.process == "crasher" and error.status == 4
    assert error.summary == (
        "crasher exited with 4 while it should be running, "
        "after 2 restarts within 600 s (its restart budget)"
    )
    assert error.tail.splitlines() == ["cannot open the database"] * 3  # three runs, one log
    assert [(r.attempt, r.delay) for r in read_restarts(tmp_path)] == [(1, 0.05), (2, 0.1)]


def test_an_exit_saying_its_peer_still_holds_its_place_is_retried_outside_the_budget(
    tmp_path: Path,
) -> None:
    # a SuperNode restarted while the SuperLink still counts it online logs Flower's exit
    # code 305 and exits with 1: the same status as its crash, told apart by its log
    runs = tmp_path / "runs"
    script = (
        "import os, sys, time\n"
        f"n = len(open({str(runs)!r}).read()) if os.path.exists({str(runs)!r}) else 0\n"
        f"open({str(runs)!r}, 'a').write('x')\n"
        "if n == 0: sys.exit(1)\n"  # it crashes ...
        "if n < 3: print('Exit Code: 305'); sys.exit(1)\n"  # ... its first two restarts refused
        "time.sleep(300)\n"
    )
    policy = RestartPolicy(
        max_restarts=1, initial_delay=0.05, busy_log=("Exit Code: 305",), busy_delay=0.05
    )
    spec = ProcessSpec(name="node", argv=[PY, "-c", script], env=ENV, restart=policy)
    with Supervisor(run_dir=tmp_path) as sup:
        sup.start(spec)
        _check_until(sup, lambda: runs.exists() and len(runs.read_text()) == 4)
        sup.check()
        assert sup.children["node"].alive()
    records = [(r.status, r.attempt, r.busy) for r in read_restarts(tmp_path)]
    assert records == [(1, 1, False), (1, 1, True), (1, 1, True)]


def test_a_service_stopped_on_purpose_is_not_restarted(
    tmp_path: Path,
) -> None:
    policy = RestartPolicy(initial_delay=0.05)
    with Supervisor(run_dir=tmp_path) as sup:
        sup.start(ProcessSpec(name="kept", argv=["sleep", "300"], env=ENV, restart=policy))
        sup.stop("kept")
        time.sleep(0.2)
        sup.check()
        assert not sup.children["kept"].alive()
    assert read_restarts(tmp_path) == ()
