"""Serve a party service: its audit log, its TLS settings, uvicorn.

Each service keeps its own tamper-evident audit log (``privacy_ledger``: canonical
JSON, SM3 Merkle tree, heads signed with the party's ``audit.key.pem``) in a ledger
database, by default ``<state>/audit.db`` (SQLite); ``service.started`` records how
it was started (TLS mode, listen address, the deployment's epoch fingerprints).
TLS is on by default and requires the aggregator's client certificate (mutual
TLS: the deployment's CA and the aggregator's name, checked per request by
:class:`api.services.peer.PeerGate` from the certificate uvicorn's protocol
:func:`api.services.peer.tls_protocol` hands to the app); plain HTTP needs
``insecure_dev=True`` and logs a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI

from api.services.peer import tls_protocol
from privacy_ledger.audit.events import register_event
from secure_fed.deploy.ceremony import read_sm2
from secure_fed.deploy.errors import TlsConfigInvalid
from secure_fed.deploy.keys import KeyManifest
from secure_fed.deploy.tls import ServerTLS
from secure_fed.secure.audit import AuditSink, LedgerAuditSink

__all__ = ["SERVICE_STARTED", "party_audit", "record_started", "serve_app"]

_log = logging.getLogger(__name__)

_LOOPBACK = ("127.0.0.1", "::1", "localhost")

SERVICE_STARTED = register_event(
    "service.started",
    "A key authority or helper service started: its TLS mode, address and key epochs.",
).name


def party_audit(
    keys: Path, state: Path, *, party: str, database_url: str | None
) -> LedgerAuditSink:
    """Open (and migrate) the party's audit ledger, heads signed with ``keys/audit.key.pem``."""
    from privacy_ledger.audit.log import AuditLog
    from privacy_ledger.db import create_ledger_engine, upgrade

    url = database_url or f"sqlite:///{(Path(state) / 'audit.db').as_posix()}"
    engine = create_ledger_engine(url)
    upgrade(engine)
    log = AuditLog(signer=read_sm2(keys, "audit"), origin=f"secure-fed/{party}")
    return LedgerAuditSink(engine=engine, log=log)


def record_started(
    audit: AuditSink,
    *,
    party: str,
    manifest: KeyManifest,
    host: str,
    port: int,
    tls: ServerTLS | None,
) -> None:
    """Record ``service.started`` with the TLS mode actually applied."""
    mode = "insecure-dev" if tls is None else ("mutual" if tls.client_ca else "server-only")
    audit.record(
        SERVICE_STARTED,
        {
            "party": party,
            "mode": manifest.mode,
            "tls": mode,
            "client_name": None if tls is None or tls.client_ca is None else tls.client_name,
            "address": f"{host}:{port}",
            "fingerprints": dict(manifest.fingerprints),
            "aggregator_key": manifest.aggregator_key.fingerprint(),
        },
    )


def serve_app(
    app: FastAPI, *, host: str, port: int, tls: ServerTLS | None, insecure_dev: bool
) -> None:
    """Run ``app`` under uvicorn until interrupted (one worker: the party keeps state).

    Raises
    ------
    TlsConfigInvalid
        If neither TLS settings nor ``insecure_dev`` are given, or both are, or
        ``insecure_dev`` with a ``host`` other than loopback.
    """
    import uvicorn

    if (tls is None) != insecure_dev:
        raise TlsConfigInvalid("give TLS certificate, key and client CA, or --insecure-dev")
    if insecure_dev and host not in _LOOPBACK:
        raise TlsConfigInvalid(f"--insecure-dev serves plain HTTP on loopback only, not {host}")
    if tls is None:
        _log.warning("serving %s:%d over plain HTTP: --insecure-dev only", host, port)
    options = {} if tls is None else {**tls.uvicorn_options(), "http": tls_protocol()}
    uvicorn.run(
        app,
        host=host,
        port=port,
        workers=1,
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
        log_level="info",
        **options,  # type: ignore[arg-type]
    )
