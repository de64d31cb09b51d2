"""A small process supervisor: start children in order, wait until healthy, stop them all.

:class:`Supervisor` runs each party of a local federation (key authority,
helper, API, SuperLink, SuperNodes, the run) as its own operating-system
process: one log file per process in ``<run_dir>/logs/``, a health check
before the next one starts, and a clean stop of every child, in reverse
order, on exit, on error, or when the caller asks (``SIGINT``/``SIGTERM``
handling is the command line's: it calls :meth:`Supervisor.stop_all`).

Each child is the leader of its own process group (``start_new_session``),
so stopping it stops what it started (uvicorn workers, Flower's processes):
``SIGTERM`` to the group, then ``SIGKILL`` after ``stop_timeout``. On Linux a
child also gets ``SIGTERM`` when the supervisor dies without stopping it
(``PR_SET_PDEATHSIG``), so a killed supervisor leaves no federation behind.

The supervisor reads no environment: the caller passes each child's
environment explicitly.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
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
    "Supervisor",
    "http_ready",
    "tcp_ready",
    "free_port",
]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_TAIL_BYTES = 4000


class ProcessFailed(DeploymentFailed):
    """A supervised process could not start or exited while it should be running."""

    code = "DEPLOY_PROCESS_FAILED"


class ProcessNotReady(ProcessFailed):
    """A supervised process did not pass its health check in time."""

    code = "DEPLOY_PROCESS_NOT_READY"


Ready = Callable[[], bool]


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
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path | None = None
    ready: Ready | None = None
    ready_timeout: float = 60.0
    expect_exit: bool = False


@dataclass(kw_only=True)
class Child:
    """A started process, its spec and its log file."""

    spec: ProcessSpec
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)
    #: Stopped on purpose (:meth:`Supervisor.stop`, :meth:`Supervisor.kill`): not a failure.
    stopped: bool = False

    @property
    def pid(self) -> int:
        """The process id (also its process group id)."""
        return self.process.pid

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.process.poll() is None

    def log_tail(self) -> str:
        """Return the end of its log file (for error messages)."""
        try:
            data = self.log_path.read_bytes()[-_TAIL_BYTES:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace")


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
    """

    def __init__(self, *, run_dir: Path, stop_timeout: float = 10.0) -> None:
        self.run_dir = Path(run_dir)
        self.logs = self.run_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.stop_timeout = float(stop_timeout)
        self.children: dict[str, Child] = {}

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
        log_path = self.logs / f"{spec.name}.log"
        log = log_path.open("ab")
        try:
            process = subprocess.Popen(
                list(spec.argv),
                env=dict(spec.env),
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
        child = Child(spec=spec, process=process, log_path=log_path, _log=log)
        self.children[spec.name] = child
        logger.info("started %s (pid %d), log %s", spec.name, process.pid, log_path)
        self._wait_ready(child)
        return child

    def _wait_ready(self, child: Child) -> None:
        spec = child.spec
        if spec.ready is None:
            return
        deadline = time.monotonic() + spec.ready_timeout
        while time.monotonic() < deadline:
            if not child.alive() and not spec.expect_exit:
                raise ProcessFailed(
                    f"{spec.name} exited with {child.process.returncode} before it was "
                    f"ready; end of {child.log_path}:\n{child.log_tail()}"
                )
            if spec.ready():
                logger.info("%s is ready", spec.name)
                return
            time.sleep(0.2)
        raise ProcessNotReady(
            f"{spec.name} not ready after {spec.ready_timeout:g} s; end of "
            f"{child.log_path}:\n{child.log_tail()}"
        )

    def check(self) -> None:
        """Raise if a service (not a job) has exited.

        Raises
        ------
        ProcessFailed
            Naming the first service found dead, with the end of its log.
        """
        for child in self.children.values():
            if not (child.spec.expect_exit or child.stopped) and not child.alive():
                raise ProcessFailed(
                    f"{child.spec.name} exited with {child.process.returncode}; end of "
                    f"{child.log_path}:\n{child.log_tail()}"
                )

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

    def kill(self, name: str) -> None:
        """``SIGKILL`` one child's process group at once (fault injection); not a failure."""
        child = self.children[name]
        child.stopped = True
        self.send_signal(name, signal.SIGKILL)
        child.process.wait(timeout=self.stop_timeout)

    def stop_all(self) -> None:
        """Stop every child, the last started first. Safe to call twice."""
        for name in reversed(list(self.children)):
            self.stop(name)

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
