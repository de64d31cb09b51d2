"""A real ``secure-fed api`` process on 127.0.0.1 over TLS, for the remote-budget tests.

The certificates are made with the ``openssl`` command line (a CA and a
server certificate for 127.0.0.1); the ledger is seeded through the API's
own context (participants, budgets, tokens) before the server starts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from api.rest import ApiSettings
from api.rest.context import build_context
from crypto.sm import SM2PrivateKey
from secure_fed.deploy.api_service import ApiEndpoint, api_spec, write_api_config
from secure_fed.deploy.supervisor import ProcessSpec, Supervisor, free_port

PARTICIPANTS = ("hospital-a", "bank-b")
ASSET = "records"


@dataclass
class BudgetApi:
    """A running API: where, its CA, the database, and a token per name."""

    endpoint: ApiEndpoint
    db_url: str
    tokens: dict[str, str]
    supervisor: Supervisor
    folder: Path
    spec: ProcessSpec


def charge_through(toml: Path, api: BudgetApi, pid: str, extra: str = "") -> None:
    """Point a node's ``[budget]`` at ``api`` (``pid``'s token in a 0600 file), then ``extra``.

    Everything from ``[budget]`` to the end of ``toml`` is replaced.
    """
    token = toml.parent / "api-token"
    token.write_text(api.tokens[pid] + "\n", encoding="utf-8")
    token.chmod(0o600)
    text = toml.read_text(encoding="utf-8")
    toml.write_text(
        text[: text.index("[budget]")]
        + f'[budget]\napi_url = "{api.endpoint.url}"\ntoken_file = "api-token"\n'
        + f'ca_file = "{api.endpoint.ca_file}"\n{extra}',
        encoding="utf-8",
    )


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_tls(folder: Path, *, name: str = "api") -> tuple[Path, Path, Path]:
    """Return (ca.pem, <name>.pem, <name>.key): a CA and a server certificate for 127.0.0.1."""
    folder.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=secure-fed test CA", cwd=folder)  # fmt: skip
    _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", "/CN=127.0.0.1", cwd=folder)  # fmt: skip
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "san.ext",
             cwd=folder)  # fmt: skip
    return folder / "ca.pem", folder / f"{name}.pem", folder / f"{name}.key"


def _key(path: Path) -> Path:
    path.write_bytes(SM2PrivateKey.generate().to_pem_unencrypted_insecure())
    path.chmod(0o600)
    return path


def seed(db_url: str, folder: Path, audit_key: Path, epsilon: str = "8") -> dict[str, str]:
    """Register the participants with one budget each; return tokens by name."""
    settings = ApiSettings(
        database_url=db_url, api_audit_key_file=audit_key, api_session_secret=SecretStr("s" * 40)
    )
    ctx = build_context(settings)
    try:
        tokens: dict[str, str] = {}
        for pid in PARTICIPANTS:
            ctx.ledger.register_participant(pid, institution=pid, kind=pid.split("-")[0])
            ctx.ledger.register_asset(pid, ASSET)
            ctx.ledger.set_budget(pid, ASSET, epsilon=epsilon, delta=1e-5)
            tokens[pid] = ctx.tokens.create(name=pid, role="participant", participant_id=pid).secret
        tokens["officer"] = ctx.tokens.create(name="officer", role="officer").secret
        revoked = ctx.tokens.create(name="gone", role="participant", participant_id=PARTICIPANTS[0])
        ctx.tokens.revoke(revoked.token.id)
        tokens["revoked"] = revoked.secret
        return tokens
    finally:
        ctx.close()


@contextmanager
def running_api(
    db_url: str, folder: Path, *, tls: bool = True, start: bool = True
) -> Iterator[BudgetApi]:
    """Seed the ledger, start ``secure-fed api`` (over TLS unless ``tls=False``), stop it.

    With ``start=False`` the caller starts it later (``supervisor.start(spec)``,
    from the thread that entered the context): until then its port refuses
    connections, as an API that comes up late.
    """
    ca, cert, key = make_tls(folder / "tls") if tls else (None, None, None)
    audit_key = _key(folder / "audit.key.pem")
    tokens = seed(db_url, folder, audit_key)
    endpoint = write_api_config(
        folder / "api",
        database_url=db_url,
        port=free_port(),
        audit_key=audit_key,
        receipt_key=_key(folder / "receipts.key.pem"),
        tls_cert=cert,
        tls_key=key,
        ca_file=ca,
    )
    spec = api_spec(endpoint, python=sys.executable, env=dict(os.environ))
    with Supervisor(run_dir=folder / "run") as supervisor:
        if start:
            supervisor.start(spec)
        yield BudgetApi(
            endpoint=endpoint,
            db_url=db_url,
            tokens=tokens,
            supervisor=supervisor,
            folder=folder,
            spec=spec,
        )


class LosingProxy:
    """A TCP proxy that drops the first answer it sees (the reply is lost after the work).

    For plain HTTP: bytes pass through unchanged, except that on the first
    connection, as soon as the server starts answering, both sockets are
    closed instead (the server did the work; the client never hears of it).
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.dropped = 0
        self._first = True
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            drop, self._first = self._first, False
            server = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, drop), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, drop: bool) -> None:
        try:
            while data := source.recv(65536):
                if drop:
                    self.dropped += 1
                    break
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()
