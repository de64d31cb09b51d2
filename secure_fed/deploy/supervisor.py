"""A small process supervisor: start children in order, wait until healthy, stop them all.

:class:`Supervisor` runs each party of a local federation (key authority,
helper, API, SuperLink, SuperNodes, the run) as its own operating-system
process: one log file per process in ``<run_dir>/logs/``, a health check
before the next one starts, and a clean stop of every child, in reverse
order, on exit, on error, or when the caller asks (``SIGINT``/``SIGTERM``
handling is the command line's: it calls :meth:`Supervisor.stop_all`).

Each child is the leader of its own process group (``start_new_session``),
so stopping it stops what it started (uvicorn workers, Flower's processes):
``SIGTERM`` to the group, then ``SIGKILL`` after ``stop_timeout``. What a child
started in a session of its own (Flower's SuperExec and its ServerApp) is found
under it in ``/proc`` and stopped first, the same way. Children marked
``stop_first`` (the round driver) are stopped before the others. On Linux a
child also gets ``SIGTERM`` when the supervisor dies without stopping it
(``PR_SET_PDEATHSIG``), so a killed supervisor leaves no federation behind.

A service with a :class:`RestartPolicy` that exits is started again by
:meth:`Supervisor.check`: after a delay that doubles from one restart to the next,
within a bounded number of restarts per time window, each checked healthy again
before it counts as up. Each restart is logged, passed to ``on_restart`` and written
as one JSON line to ``<run_dir>/supervisor.jsonl`` (:func:`read_restarts`). A
child without a policy that fails, or one whose budget is spent, is a
:class:`ProcessFailed` whose message ends with the last lines of its log
(bounded, PEM blocks and secret-looking tokens redacted).

The supervisor reads no environment: the caller passes each child's
environment explicitly; it adds only ``PYTHONUNBUFFERED=1`` (unless the caller
set it), so a Python child killed outright has written its last lines.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from secure_fed.errors import DeploymentFailed

__all__ = [
    "Child",
    "ProcessFailed",
    "ProcessNotReady",
    "ProcessSpec",
    "RESTARTS_FILE",
    "Restart",
    "RestartPolicy",
    "Supervisor",
    "read_restarts",
    "http_ready",
    "tcp_ready",
    "free_port",
]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
#: At most this many of a failed process's last log lines go into its error ...
TAIL_LINES = 20
#: ... and at most this many bytes of them.
TAIL_BYTES = 4096
#: What stands in for a PEM block or a secret-looking run of characters in a log tail.
REDACTED = "[redacted]"
#: Added to every child's environment unless the caller sets it: a Python child writes
#: each line to its log as it prints it, so a child killed outright (``SIGKILL``) leaves
#: its last lines in the log instead of in a lost stdout buffer.
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}
_PEM = re.compile(r"-----BEGIN [^-]+-----.*?(?:-----END [^-]+-----|\Z)", re.DOTALL)
#: 32 or more characters of base64url, hex or dots with a letter and a digit: a token
#: (``sft_<id>.<secret>``), a key, a secret; paths, words and addresses are kept.
_SECRETISH = re.compile(
    r"(?=[A-Za-z0-9_.+=-]*[0-9])(?=[A-Za-z0-9_.+=-]*[A-Za-z])[A-Za-z0-9_.+=-]{32,}"
)


def redact(text: str) -> str:
    """Return ``text`` with PEM blocks and secret-looking tokens replaced by ``[redacted]``.

    The services log no keys; this is the second line of defence for an error
    message that quotes a log.
    """
    return _SECRETISH.sub(REDACTED, _PEM.sub(REDACTED, text))


def describe_status(status: int | None) -> str:
    """Return ``exited with 3``, ``killed by SIGKILL`` or ``still running`` for a status."""
    if status is None:
        return "still running"
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-status).name}"
        return f"killed by signal {-status}"
    return f"exited with {status}"


class ProcessFailed(DeploymentFailed):
    """A supervised process could not start or exited while it should be running.

    Its message's first line says which process, how it ended, the rounds it
    cost (when known) and where its log is; the lines after it are the end of
    that log (:data:`TAIL_LINES` lines, :data:`TAIL_BYTES` bytes at most,
    :func:`redact`-ed). The parts are attributes too.

    Parameters
    ----------
    summary
        One line: what failed.
    process
        The process's name under the supervisor.
    status
        Its exit status (negative: the signal that killed it).
    log_path
        Its log file.
    tail
        The end of its log, already bounded and redacted.
    rounds
        The rounds it cost, one short text each (``round 2: aborted: ...``).
    """

    code = "DEPLOY_PROCESS_FAILED"

    def __init__(
        self,
        summary: str,
        *,
        process: str | None = None,
        status: int | None = None,
        log_path: Path | None = None,
        tail: str = "",
        rounds: Sequence[str] = (),
    ) -> None:
        self.summary = summary
        self.process = process
        self.status = status
        self.log_path = log_path
        self.tail = tail
        self.rounds = tuple(rounds)
        first = summary
        if self.rounds:
            first += f"; rounds not published: {'; '.join(self.rounds)}"
        if log_path is not None:
            lines = len(tail.splitlines())
            first += f"; log {log_path}, last {lines} lines quoted"
        super().__init__(f"{first}\n{tail}".rstrip("\n") if log_path is not None else first)

    def with_rounds(self, rounds: Sequence[str]) -> ProcessFailed:
        """Return the same failure naming the rounds it cost."""
        return type(self)(
            self.summary,
            process=self.process,
            status=self.status,
            log_path=self.log_path,
            tail=self.tail,
            rounds=rounds,
        )


class ProcessNotReady(ProcessFailed):
    """A supervised process did not pass its health check in time."""

    code = "DEPLOY_PROCESS_NOT_READY"


Ready = Callable[[], bool]

#: The run folder's record of every restart, one JSON object a line (:class:`Restart`).
RESTARTS_FILE = "supervisor.jsonl"


@dataclass(frozen=True, kw_only=True)
class RestartPolicy:
    """When a service that exited is started again.

    The ``n``-th restart within ``window`` seconds waits ``initial_delay * 2**(n-1)``
    seconds, at most ``max_delay``; once ``max_restarts`` restarts fall within the
    last ``window`` seconds, the next exit is a :class:`ProcessFailed`.

    An exit after a restart with a status in ``busy_statuses``, or whose run wrote one
    of ``busy_log`` to its log, means the service's peer still holds its old place (a
    Flower SuperNode the SuperLink still counts online logs ``Exit Code: 305`` and
    exits with 1): it is retried every ``busy_delay`` seconds without spending the
    budget, for at most ``busy_for`` seconds after the first such exit.
    """

    max_restarts: int = 5
    window: float = 600.0
    initial_delay: float = 0.5
    max_delay: float = 8.0
    busy_statuses: frozenset[int] = frozenset()
    busy_log: tuple[str, ...] = ()
    busy_delay: float = 10.0
    busy_for: float = 120.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before restart number ``attempt`` (1, 2, ...) of the window."""
        return float(min(self.max_delay, self.initial_delay * 2 ** max(0, attempt - 1)))


@dataclass(frozen=True, kw_only=True)
class Restart:
    """One restart the supervisor made: a line of :data:`RESTARTS_FILE`."""

    process: str
    status: int | None
    exit: str
    attempt: int
    delay: float
    time: float
    busy: bool = False


def read_restarts(run_dir: Path) -> tuple[Restart, ...]:
    """Return the restarts recorded in ``run_dir`` (none if the file is missing)."""
    path = Path(run_dir) / RESTARTS_FILE
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return ()
    out: list[Restart] = []
    for line in lines:
        with contextlib.suppress(ValueError, TypeError):
            out.append(Restart(**json.loads(line)))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class ProcessSpec:
    """One process to run.

    Parameters
    ----------
    name
        Unique name (also the log file's: ``logs/<name>.log``).
    argv
        Command and arguments.
    env
        The child's whole environment.
    cwd
        Working directory (default: the run directory).
    ready
        Health check, polled until true (``None``: started is ready).
    ready_timeout
        Seconds to wait for ``ready``.
    expect_exit
        The process is a job that ends by itself (the run), not a service.
    stop_first
        Stopped before every child without it (the round driver: once the
        participants' nodes are gone it would only open rounds that abort).
    restart
        Start a service that exited again (``None``: its exit is a failure).
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path | None = None
    ready: Ready | None = None
    ready_timeout: float = 60.0
    expect_exit: bool = False
    stop_first: bool = False
    restart: RestartPolicy | None = None


@dataclass(kw_only=True)
class Child:
    """A started process, its spec and its log file."""

    spec: ProcessSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)
    #: Stopped on purpose (:meth:`Supervisor.stop`, :meth:`Supervisor.kill`): not a failure.
    stopped: bool = False
    #: When it was restarted (``time.monotonic()``), budget-spending restarts only.
    restarts: list[float] = field(default_factory=list)
    #: When the current run of "busy" exits began (see :class:`RestartPolicy`).
    busy_since: float | None = None
    #: When it was last started (``time.monotonic()``).
    started_at: float = field(default_factory=time.monotonic)
    #: Where its current run's lines begin in its log (the log is appended across restarts).
    log_offset: int = 0
    #: When the supervisor will start it again, once it exited.
    restart_at: float | None = None

    @property
    def pid(self) -> int:
        """The process id (also its process group id)."""
        return self.process.pid

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def log_tail(self, lines: int = TAIL_LINES, max_bytes: int = TAIL_BYTES) -> str:
        """Return the last ``lines`` lines of its log, at most ``max_bytes``, redacted."""
        try:
            with self.log_path.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - 4 * max_bytes))  # room for what redaction shortens
                data = handle.read()
        except OSError:
            return ""
        text = redact(data.decode("utf-8", "replace"))
        kept = text.splitlines()[-lines:] if lines > 0 else []
        out = "\n".join(kept)
        while len(out.encode()) > max_bytes and kept:  # long lines: drop the oldest
            kept = kept[1:]
            out = "\n".join(kept)
        return out

    def failure(self, what: str) -> ProcessFailed:
        """Return a :class:`ProcessFailed` for this child (``<name> <how> <what>``, its log)."""
        status = self.process.returncode
        return ProcessFailed(
            f"{self.spec.name} {describe_status(status)} {what}".rstrip(),
            process=self.spec.name,
            status=status,
            log_path=self.log_path,
            tail=self.log_tail(),
        )


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """State, parent pid and process group of ``pid`` from ``/proc`` (None: gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[2])


def _gone(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is None or stat[0] in ("Z", "X")


def detached_descendants(root: int) -> list[int]:
    """Living processes below ``root`` outside its process group, deepest first.

    Flower's SuperLink starts its SuperExec, which starts the ServerApp, each in a
    session of its own: a signal to the SuperLink's group does not reach them.
    Empty where there is no ``/proc``.
    """
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    for pid in entries:
        stat = _proc_stat(pid)
        if stat is not None and stat[0] not in ("Z", "X"):
            parents[pid], groups[pid] = stat[1], stat[2]
    order: list[int] = []
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - set(order)
        order.extend(sorted(frontier))
    return [pid for pid in reversed(order) if groups.get(pid) != root]


_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux); return success.

    A grandchild whose parent dies is then re-parented here, not to init (which
    in a container may never reap it), so the supervisor can stop and reap it.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)) == 0
    except (OSError, AttributeError):
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervisor:
    """Start processes in order, check them, stop all of them (reverse order).

    Parameters
    ----------
    run_dir
        Directory of the run (logs go to ``run_dir/logs``; created).
    stop_timeout
        Seconds between ``SIGTERM`` and ``SIGKILL`` of a process group.
    adopt_orphans
        Make this process the subreaper of its descendants (Linux,
        ``PR_SET_CHILD_SUBREAPER``): a grandchild left behind by a child that
        died is re-parented here, stopped by :meth:`stop_all` and reaped (by
        :meth:`check` and :meth:`stop_all`), so nothing is left defunct or
        running. For a process that runs one supervisor (the command line); a
        test process should not set it.
    on_restart
        Called with each :class:`Restart` as it is decided (the command line
        prints it as progress); it is logged and written to :data:`RESTARTS_FILE`
        either way.
    """

    def __init__(
        self,
        *,
        run_dir: Path,
        stop_timeout: float = 10.0,
        adopt_orphans: bool = False,
        on_restart: Callable[[Restart], None] | None = None,
    ) -> None:
        self.on_restart = on_restart
        self.run_dir = Path(run_dir)
        self.logs = self.run_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.stop_timeout = float(stop_timeout)
        self.children: dict[str, Child] = {}
        self.adopt_orphans = bool(adopt_orphans) and _become_subreaper()

    def orphans(self) -> list[int]:
        """Return the processes this one adopted (their parent died), ended ones too.

        Empty unless the supervisor was made with ``adopt_orphans`` (Linux only).
        """
        if not self.adopt_orphans:
            return []
        mine = {child.pid for child in self.children.values()}
        me = os.getpid()
        try:
            entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
        except OSError:
            return []
        return [
            pid
            for pid in entries
            if pid not in mine and (stat := _proc_stat(pid)) is not None and stat[1] == me
        ]

    def reap(self) -> int:
        """Reap every adopted process that has ended; return how many (no defunct entries)."""
        reaped = 0
        for pid in self.orphans():
            with contextlib.suppress(ChildProcessError, OSError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
        return reaped

    def stop_orphans(self) -> None:
        """Stop and reap what was adopted: ``SIGTERM``, then ``SIGKILL`` after the timeout."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            self.reap()
            living = self.orphans()
            if not living:
                return
            logger.info(
                "stopping adopted processes %s with %s", living, signal.Signals(signum).name
            )
            for pid in living:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
            end = time.monotonic() + self.stop_timeout
            while time.monotonic() < end and self.orphans():
                self.reap()
                time.sleep(0.1)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(self, spec: ProcessSpec) -> Child:
        """Start ``spec`` and wait for its health check.

        Raises
        ------
        ProcessFailed
            The name is taken, the command cannot start, or it exits before
            it is ready (the message holds the end of its log).
        ProcessNotReady
            The health check did not pass within ``ready_timeout``.
        """
        if spec.name in self.children and self.children[spec.name].alive():
            raise ProcessFailed(f"name: a process {spec.name!r} is already running")
        process, log_path, log = self._spawn(spec)
        child = Child(spec=spec, process=process, log_path=log_path, _log=log)
        self.children[spec.name] = child
        self._wait_ready(child)
        return child

    def _spawn(self, spec: ProcessSpec) -> tuple[subprocess.Popen[bytes], Path, IO[bytes]]:
        log_path = self.logs / f"{spec.name}.log"
        log = log_path.open("ab")
        try:
            process = subprocess.Popen(
                list(spec.argv),
                env={**UNBUFFERED, **spec.env},
                cwd=spec.cwd or self.run_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - sets PDEATHSIG only
            )
        except OSError as exc:
            log.close()
            raise ProcessFailed(f"{spec.name}: cannot start {spec.argv[0]!r}: {exc}") from None
        logger.info("started %s (pid %d), log %s", spec.name, process.pid, log_path)
        return process, log_path, log

    def _wait_ready(self, child: Child, *, restarted: bool = False) -> None:
        """Poll the health check; a restarted child that dies meanwhile is left to :meth:`check`."""
        spec = child.spec
        if spec.ready is None:
            return
        deadline = time.monotonic() + spec.ready_timeout
        while time.monotonic() < deadline:
            if not child.alive() and not spec.expect_exit:
                if restarted:
                    return
                raise child.failure("before it was ready")
            if spec.ready():
                logger.info("%s is ready", spec.name)
                return
            time.sleep(0.2)
        raise ProcessNotReady(
            f"{spec.name} not ready after {spec.ready_timeout:g} s",
            process=spec.name,
            log_path=child.log_path,
            tail=child.log_tail(),
        )

    def check(self) -> None:
        """Restart the services that exited and may be; raise if one may not.

        A service with a :class:`RestartPolicy` is scheduled for a restart when it
        is first found dead (the restart is recorded then) and started again by the
        first call after its delay, which waits for its health check.

        Raises
        ------
        ProcessFailed
            Naming the first service found dead that has no restart policy or
            whose restart budget is spent, with the end of its log.
        ProcessNotReady
            A restarted service did not pass its health check in time.
        """
        self.reap()
        for child in list(self.children.values()):
            if child.spec.expect_exit or child.stopped or child.alive():
                continue
            policy = child.spec.restart
            if policy is None:
                raise child.failure("while it should be running")
            if child.restart_at is None:
                self._schedule(child, policy)
            if child.restart_at is not None and time.monotonic() >= child.restart_at:
                self._restart(child)

    def _schedule(self, child: Child, policy: RestartPolicy) -> None:
        """Decide when ``child`` (dead) starts again and record it; raise if its budget is spent."""
        now = time.monotonic()
        status = child.process.returncode
        busy = (
            (status in policy.busy_statuses or self._logged(child, policy.busy_log))
            and bool(child.restarts)
            and (child.busy_since is None or now - child.busy_since <= policy.busy_for)
        )
        recent = [t for t in child.restarts if now - t < policy.window]
        if busy:
            child.busy_since = child.busy_since or now
            attempt, delay = len(recent), policy.busy_delay
        else:
            child.busy_since = None
            if len(recent) >= policy.max_restarts:
                times = f"{len(recent)} restart{'s' if len(recent) != 1 else ''}"
                raise child.failure(
                    f"while it should be running, after {times} within "
                    f"{policy.window:g} s (its restart budget)"
                )
            attempt, delay = len(recent) + 1, policy.delay(len(recent) + 1)
            child.restarts = [*recent, now]
        child.restart_at = now + delay
        record = Restart(
            process=child.spec.name,
            status=status,
            exit=describe_status(status),
            attempt=attempt,
            delay=delay,
            time=time.time(),
            busy=busy,
        )
        logger.log(
            logging.INFO if self.on_restart is not None else logging.WARNING,  # said there
            "%s %s: restarting it in %g s (restart %d of at most %d within %g s%s)",
            record.process, record.exit, delay, attempt, policy.max_restarts, policy.window,
            "; its peer still holds its place: not counted again" if busy else "",
        )  # fmt: skip
        with (self.run_dir / RESTARTS_FILE).open("a") as handle:
            handle.write(json.dumps(dataclasses.asdict(record), sort_keys=True) + "\n")
        if self.on_restart is not None:
            self.on_restart(record)

    @staticmethod
    def _logged(child: Child, texts: Sequence[str]) -> bool:
        """Whether the child's current run wrote one of ``texts`` (its last 64 KiB)."""
        if not texts:
            return False
        try:
            with child.log_path.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(child.log_offset, size - 65536))
                ran = handle.read().decode("utf-8", "replace")
        except OSError:
            return False
        return any(text in ran for text in texts)

    def _restart(self, child: Child) -> None:
        """Start ``child``'s spec again (same log, appended) and wait for its health check."""
        with contextlib.suppress(ProcessLookupError):  # what its old group left behind
            os.killpg(child.pid, signal.SIGKILL)
        child._log.close()
        with contextlib.suppress(OSError):
            child.log_offset = child.log_path.stat().st_size  # before the new run writes
        child.process, child.log_path, child._log = self._spawn(child.spec)
        child.started_at, child.restart_at = time.monotonic(), None
        self._wait_ready(child, restarted=True)

    def send_signal(self, name: str, signum: int) -> None:
        """Send ``signum`` to one child's process group (fault injection, restarts)."""
        child = self.children[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    def stop(self, name: str) -> int | None:
        """Stop one child: ``SIGTERM`` to its group, ``SIGKILL`` after the timeout.

        Returns
        -------
        int or None
            Its exit status (``None`` if it could not be reaped).
        """
        child = self.children[name]
        child.stopped = True
        if child.alive():
            self._stop_detached(child)
            self.send_signal(name, signal.SIGTERM)
            try:
                child.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                logger.warning("%s ignored SIGTERM for %g s: SIGKILL", name, self.stop_timeout)
                self.send_signal(name, signal.SIGKILL)
        else:  # its group may still hold grandchildren
            self.send_signal(name, signal.SIGKILL)
        try:
            status = child.process.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            status = None
        child._log.close()
        return status

    def _stop_detached(self, child: Child) -> None:
        """Stop what ``child`` started in sessions of their own, before the child itself."""
        detached = detached_descendants(child.pid)
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for pid in detached:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
            end = time.monotonic() + self.stop_timeout
            while time.monotonic() < end and not all(_gone(p) for p in detached):
                time.sleep(0.1)
            detached = [p for p in detached if not _gone(p)]
            if not detached:
                return
            logger.warning("%s: %s ignored SIGTERM: SIGKILL", child.spec.name, detached)

    def kill(self, name: str) -> None:
        """``SIGKILL`` one child's process group at once (fault injection); not a failure."""
        child = self.children[name]
        child.stopped = True
        self.send_signal(name, signal.SIGKILL)
        child.process.wait(timeout=self.stop_timeout)

    def stop_order(self) -> list[str]:
        """Return the order :meth:`stop_all` stops in: ``stop_first`` children, then the rest.

        Each part the last started first.
        """
        names = list(reversed(self.children))
        first = [n for n in names if self.children[n].spec.stop_first]
        return first + [n for n in names if n not in first]

    def stop_all(self) -> None:
        """Stop every child in :meth:`stop_order`, then what was adopted. Safe to call twice."""
        for name in self.stop_order():
            self.stop(name)
        self.stop_orphans()

    def wait(
        self, name: str, timeout: float | None = None, poll: Callable[[], None] | None = None
    ) -> int:
        """Wait for a job to end and return its exit status.

        ``poll`` is called every half second while waiting; it may raise to stop
        waiting (the command line re-raises a stop signal a fork swallowed).

        Raises
        ------
        ProcessFailed
            A service died meanwhile, or the job did not end in ``timeout`` seconds.
        """
        child = self.children[name]
        deadline = None if timeout is None else time.monotonic() + timeout
        while child.alive():
            self.check()
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() > deadline:
                raise ProcessFailed(f"{name} still running after {timeout:g} s")
            time.sleep(0.5)
        return int(child.process.returncode)


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port free on ``host`` right now (the OS's choice)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tcp_ready(host: str, port: int) -> Ready:
    """Health check: something accepts TCP connections on ``host:port``."""

    def check() -> bool:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            return False

    return check


def http_ready(
    url: str,
    *,
    ca_file: Path | None = None,
    client_cert: tuple[Path, Path] | None = None,
) -> Ready:
    """Health check: ``GET url`` answers 200.

    For https the server is verified against ``ca_file``; ``client_cert``
    (certificate, key) is presented to a server that requires mutual TLS.
    """

    def check() -> bool:
        verify: ssl.SSLContext | bool = False
        if ca_file is not None:
            verify = ssl.create_default_context(cafile=str(ca_file))
            if client_cert is not None:
                verify.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
        try:
            return httpx.get(url, timeout=2, verify=verify, trust_env=False).status_code == 200
        except (httpx.HTTPError, ssl.SSLError, OSError):
            return False

    return check
