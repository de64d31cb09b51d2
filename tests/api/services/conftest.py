"""Party services as real processes on loopback: start, wait on /healthz, stop by pid."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from secure_fed.deploy.keys import create_keys
from secure_fed.deploy.tls import ClientTLS, LocalCA

IDS = ("h1", "h2", "b1")
SHAPE = (64, 4)
STARTUP_SECONDS = 90.0


def free_port() -> int:
    """A port nothing listens on right now (bound to 0, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """One ``secure-fed keyauthority|helper|verifier serve`` process."""

    def __init__(self, party: str, keys: Path, state: Path, *, tls: bool = True, **opts: str):
        self.party, self.keys, self.state, self.tls = party, keys, state, tls
        self.opts = opts
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        ca = LocalCA(keys.parent / "tls")
        self.ca = ca
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.client_tls: ClientTLS = ca.client("aggregator") if tls else ca.client()

    def args(self) -> list[str]:
        name = self.party if self.party in ("keyauthority", "verifier") else "helper"
        args = [name, "serve", "--keys", str(self.keys), "--state", str(self.state)]
        args += ["--port", str(self.port)]
        if self.tls:
            args += ["--tls-cert", str(self.ca.cert(name)), "--tls-key", str(self.ca.key(name))]
            args += ["--client-ca", str(self.ca.ca_cert)]
        else:
            args.append("--insecure-dev")
        for key, value in self.opts.items():
            args += [f"--{key.replace('_', '-')}", value]
        return args

    def start(self) -> Service:
        code = "import sys; from api.cli import main; sys.argv[0] = 'secure-fed'; main()"
        self.state.parent.mkdir(parents=True, exist_ok=True)
        with (self.state.parent / f"{self.party}-{self.port}.log").open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", code, *self.args()], stderr=log)
        self._wait()
        return self

    def start_with(self, client_tls: ClientTLS) -> Service:
        """Start, checking health as the client ``client_tls`` (the one the service serves)."""
        self.client_tls = client_tls
        return self.start()

    def client(self) -> httpx.Client:
        if not self.tls:
            return httpx.Client(timeout=10.0)
        return httpx.Client(verify=self.client_tls.ssl_context(), timeout=10.0)

    def _wait(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        with self.client() as client:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.party} exited with {self.proc.returncode}")
                try:
                    if client.get(f"{self.url}/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    time.sleep(0.2)
        raise RuntimeError(f"{self.party} did not answer /healthz in {STARTUP_SECONDS} s")

    def kill(self) -> None:
        """SIGKILL the process (no cleanup, as a crash or an OOM kill would)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def ceremonies() -> dict[str, Path]:
    """The key ceremony of each mode, made once per worker on first use (see :func:`_keys`)."""
    return {}


def _keys(mode: str, ceremonies: dict[str, Path], factory: pytest.TempPathFactory) -> Path:
    """A module's own copy of the worker's ``mode`` ceremony: its services' state stays its own.

    The ckks ceremony (CKKS contexts and keys) takes seconds; three modules use it.
    """
    if mode not in ceremonies:
        made = factory.mktemp(f"ceremony-{mode}") / "keys"
        create_keys(made, mode=mode, participant_ids=IDS, shape=SHAPE, min_participants=2)
        ceremonies[mode] = made
    root = factory.mktemp(f"svc-{mode}") / "keys"
    shutil.copytree(ceremonies[mode], root)
    return root


@pytest.fixture(scope="module")
def ckks_keys(tmp_path_factory: pytest.TempPathFactory, ceremonies: dict[str, Path]) -> Path:
    return _keys("ckks", ceremonies, tmp_path_factory)


@pytest.fixture(scope="module")
def shares_keys(tmp_path_factory: pytest.TempPathFactory, ceremonies: dict[str, Path]) -> Path:
    return _keys("shares", ceremonies, tmp_path_factory)


@pytest.fixture(scope="module")
def ckks_authority(ckks_keys: Path) -> Iterator[Service]:
    service = Service("keyauthority", ckks_keys / "keyauthority", ckks_keys.parent / "ka-state")
    yield service.start()
    service.stop()


@pytest.fixture(scope="module")
def ckks_verifier(ckks_keys: Path) -> Iterator[Service]:
    """The ceremony's verifier (the key authority pins it: nothing unattested is decrypted)."""
    service = Service("verifier", ckks_keys / "verifier", ckks_keys.parent / "verifier-state")
    yield service.start()
    service.stop()


@pytest.fixture(scope="module")
def shares_services(shares_keys: Path) -> Iterator[tuple[Service, Service]]:
    state = shares_keys.parent
    authority = Service("keyauthority", shares_keys / "keyauthority", state / "ka-state")
    helper = Service("helper", shares_keys / "helper", state / "helper-state", max_body="65536")
    yield authority.start(), helper.start()
    authority.stop()
    helper.stop()
