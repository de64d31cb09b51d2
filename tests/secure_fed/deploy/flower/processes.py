"""Start a SuperLink, SuperNodes and ``flwr run`` as real processes on loopback (tests only)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from secure_fed.deploy.flower import app_dir


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes:
    """Child processes of one test, each logging to its own file; all stopped by :meth:`stop`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.link_port = free_port()
        self.flwr_home = root / "flwr-home"
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        (self.flwr_home / "config.toml").write_text(
            '[superlink]\ndefault = "tryout"\n\n[superlink.tryout]\n'
            f'address = "127.0.0.1:{self.link_port}"\ninsecure = true\n',
            encoding="utf-8",
        )

    def env(self) -> dict[str, str]:
        return {**os.environ, "FLWR_HOME": str(self.flwr_home)}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("wb")
        child = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env(),
            cwd=self.root,
            start_new_session=True,
        )
        self.children[name] = child
        return child

    def superlink(self) -> None:
        self.start(
            "superlink",
            [
                "flower-superlink",
                "--insecure",
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.link_port),
                "--database",
                str(self.root / "superlink.db"),
            ],
        )
        wait_for(lambda: _listening(self.link_port), timeout=60, what="the SuperLink")

    def supernode(self, name: str, participant_toml: Path) -> None:
        self.start(
            name,
            [
                "flower-supernode",
                "--insecure",
                "--superlink",
                f"127.0.0.1:{self.link_port}",
                "--port",
                str(free_port()),
                "--node-config",
                f'participant-config="{participant_toml}"',
            ],
        )

    def flwr_run(self, server_toml: Path) -> str:
        done = subprocess.run(
            [
                "flwr",
                "run",
                str(app_dir()),
                "tryout",
                "--run-config",
                f'server-config="{server_toml}"',
            ],
            env=self.env(),
            cwd=self.root,
            capture_output=True,
            timeout=120,
            check=True,
        )
        return done.stdout.decode()

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        child = self.children.pop(name)
        os.killpg(child.pid, sig)
        child.wait(timeout=30)

    def stop(self) -> None:
        for name in list(self.children):
            child = self.children.pop(name)
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait(timeout=10)

    def logs(self) -> str:
        return "\n".join(
            f"==== {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in self.root.glob("*.log")
        )


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} not ready after {timeout} s")
