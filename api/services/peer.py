"""The client certificate of a mutual-TLS connection, given to the app and checked there.

uvicorn verifies the client certificate against the CA but does not pass it to
the application. :func:`tls_protocol` returns uvicorn's HTTP protocol class
extended to add the ASGI TLS extension to every request's scope
(``scope["extensions"]["tls"]``: ``client_cert_chain`` as PEM, ``tls_version``,
``cipher_suite``), read from the connection's ``ssl_object`` once per connection.

:class:`PeerGate` is the ASGI middleware of a party service that serves one
client: it checks the leaf certificate's name on every request
(:func:`secure_fed.deploy.peer.require_peer`); a certificate of the same CA with
another name (a participant's, another service's) gets a 403 problem
``DEPLOY_PEER_REFUSED`` and an ``access.denied`` audit event, before the body is
read. A request without the extension (the app served some other way) is
refused the same way: the gate fails closed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from api.rest.problems import problem_response
from secure_fed.deploy.errors import PeerRefused
from secure_fed.deploy.peer import require_peer
from secure_fed.secure.audit import AuditSink

__all__ = ["PeerGate", "tls_extension", "tls_protocol"]

_log = logging.getLogger(__name__)


def tls_extension(ssl_object: ssl.SSLObject | None) -> dict[str, Any]:
    """Return the ASGI TLS extension of a connection (empty chain without a certificate)."""
    der = None if ssl_object is None else ssl_object.getpeercert(binary_form=True)
    cipher = None if ssl_object is None else ssl_object.cipher()
    return {
        "server_cert": None,
        "client_cert_chain": [] if not der else [ssl.DER_cert_to_PEM_cert(der)],
        "client_cert_name": None,
        "client_cert_error": None,
        "tls_version": None if ssl_object is None else ssl_object.version(),
        "cipher_suite": None if cipher is None else cipher[0],
    }


def _with_tls(app: ASGIApp, tls: dict[str, Any]) -> ASGIApp:
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, "extensions": {**scope.get("extensions", {}), "tls": tls}}
        await app(scope, receive, send)

    return wrapped


def tls_protocol() -> type[asyncio.Protocol]:
    """Return uvicorn's HTTP protocol (httptools if installed, else h11) adding the TLS scope."""
    base: type[Any]
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # pragma: no cover - uvicorn without httptools
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class TlsScopeProtocol(base):  # type: ignore[misc]
        app: ASGIApp  # set by uvicorn's protocol: the application of each request

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            tls = tls_extension(transport.get_extra_info("ssl_object"))
            self.app = _with_tls(self.app, tls)

    return TlsScopeProtocol


def _leaf_der(scope: Scope) -> bytes | None:
    chain = scope.get("extensions", {}).get("tls", {}).get("client_cert_chain") or []
    if not chain:
        return None
    try:
        return ssl.PEM_cert_to_DER_cert(str(chain[0]))
    except ValueError:
        return None


class PeerGate:
    """Serve only the client whose certificate names ``expected`` (403 problem otherwise).

    Parameters
    ----------
    app
        The ASGI application.
    party
        The service's name in the audit event (``keyauthority``, ``helper``).
    expected
        The one client name served (the aggregator's).
    audit
        Sink of the ``access.denied`` event of each refusal (``None``: logged only).
    """

    def __init__(self, app: ASGIApp, *, party: str, expected: str, audit: AuditSink | None) -> None:
        self.app, self.party, self.expected, self.audit = app, party, expected, audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the peer of an HTTP request; pass it on or answer 403."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            require_peer(_leaf_der(scope), expected=self.expected)
        except PeerRefused as exc:
            await self._refuse(exc, scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refuse(self, exc: PeerRefused, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client") or ("?", 0)
        _log.warning("%s refused a client at %s:%s: %s", self.party, *client, exc.message)
        if self.audit is not None:
            await run_in_threadpool(
                self.audit.record,
                "access.denied",
                {
                    "party": self.party,
                    "op": str(scope.get("path", ""))[:200],
                    "code": exc.code,
                    "reason": exc.message,
                    "client": f"{client[0]}:{client[1]}",
                },
            )
        request = Request(scope, receive)
        response = problem_response(request, code=exc.code, status=403, detail=exc.message)
        await response(scope, receive, send)
