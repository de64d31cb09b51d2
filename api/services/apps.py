"""FastAPI applications of the key authority and the helper (one process each).

Each route takes the aggregator's request bytes (``application/octet-stream``),
hands them to the party's byte handler and returns its reply bytes. The handlers
authenticate every request themselves (SM2 signature or HMAC-SM3 tag, round,
purpose, fresh nonce persisted across restarts) and audit every refusal; the
transport adds mutual TLS, the client's name (``client_name``: only the
aggregator's certificate is served, :class:`api.services.peer.PeerGate`) and a
body size limit. A refusal is an RFC 9457 problem
whose ``code`` is the party's typed error code
(:class:`secure_fed.deploy.transport.RemoteParty` raises the same class again).
Requests are served one at a time per party (the parties keep round state).

Routes: ``POST /v1/decrypt`` (with the verifier's attestation in the
``secure-fed-attestation`` header, hex, in ckks mode with a verifier pinned),
``/v1/plan``, ``/v1/deal``, ``/v1/deal-range``,
``/v1/deal-compare``, ``/v1/deal-masks`` (key authority), ``POST /v1/helper`` (helper),
``GET /v1/contexts/{scoring|publication}`` (the key authority's public contexts, for
participants to check by fingerprint), ``GET /healthz``.

``POST /v1/notice`` (both parties) takes a participant's signed upload notice
(:mod:`secure_fed.secure.upload_notices`) and returns the acknowledgement; with
``client_name`` set, it is the one route served to the enrolled participants' client
certificates (a certificate naming an enrolled participant id) and not to the
aggregator's, every other route the other way round.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from api.rest.errors import InternalFault, NotFound, RequestInvalid
from api.rest.middleware import ServiceMiddleware
from api.rest.problems import install_problem_handlers, problem_response
from api.services.peer import PeerGate
from crypto.errors import CryptoError
from secure_fed.deploy.errors import KeyDirectoryInvalid, PeerRefused
from secure_fed.deploy.keys import KeyAuthorityParty
from secure_fed.deploy.peer import certificate_names, require_peer
from secure_fed.deploy.transport import (
    ATTESTATION_HEADER,
    AUTHORITY_PATHS,
    HELPER_PATH,
    OCTET_STREAM,
)
from secure_fed.errors import (
    AuthorityRequestMalformed,
    ConfigurationInvalid,
    ReleaseRefused,
    SecureFedError,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
    UploadRejected,
)
from secure_fed.secure.audit import AuditSink, LedgerAuditSink
from secure_fed.secure.parties.helper import HelperParty
from secure_fed.secure.protocol.upload_notice import NOTICE_PATH

__all__ = [
    "DEFAULT_MAX_BODY",
    "NOTICE_PATH",
    "create_helper_app",
    "create_keyauthority_app",
    "party_status",
]

_log = logging.getLogger(__name__)

#: Largest request body (a decryption request of a 10,000 x 10 aggregate is a few MB).
DEFAULT_MAX_BODY = 64 << 20

#: HTTP status of a party's refusal, by error class (first match wins).
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (ServerRequestUnauthenticated, 403),  # and PeerRefused, a client of another name
    (ServerRequestReplayed, 409),
    (AuthorityRequestMalformed, 400),
    (UploadRejected, 400),
    (CryptoError, 400),
    (ReleaseRefused, 403),
    (ConfigurationInvalid, 422),
)

Handler = Callable[[bytes], bytes]


class _NoticeGate(PeerGate):
    """:class:`PeerGate`, except that :data:`NOTICE_PATH` serves the enrolled participants.

    A notice authenticates itself (the participant's SM2 signature); the certificate
    check keeps the aggregator off the participants' route and the participants off
    the aggregator's, and audits either refusal the way the peer gate does.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        party: str,
        expected: str,
        participants: frozenset[str],
        audit: AuditSink | None,
    ) -> None:
        super().__init__(app, party=party, expected=expected, audit=audit)
        self.participants = participants

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check a participant's certificate on the notice route; the aggregator's elsewhere."""
        if scope["type"] != "http" or scope.get("path") != NOTICE_PATH:
            await super().__call__(scope, receive, send)
            return
        try:
            der = _leaf(scope)
            names = () if der is None else certificate_names(der)
            if not any(_names(der, p) for p in names if p in self.participants):
                raise PeerRefused(
                    f"the notice route serves enrolled participants only, not {list(names)}"
                )
        except PeerRefused as exc:
            await self._refuse(exc, scope, receive, send)
            return
        await self.app(scope, receive, send)


def _leaf(scope: Scope) -> bytes | None:
    chain = scope.get("extensions", {}).get("tls", {}).get("client_cert_chain") or []
    try:
        return ssl.PEM_cert_to_DER_cert(str(chain[0])) if chain else None
    except ValueError:
        return None


def _names(der: bytes | None, name: str) -> bool:
    """Whether the client certificate ``der`` names ``name`` (the peer check, as a test)."""
    try:
        require_peer(der, expected=name)
    except PeerRefused:
        return False
    return True


def party_status(exc: Exception) -> int:
    """Return the HTTP status of a party's typed error (500 for anything else)."""
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


async def _on_party_error(request: Request, exc: Exception) -> JSONResponse:
    status = party_status(exc)
    code = str(getattr(exc, "code", InternalFault.code))
    message = str(getattr(exc, "message", exc))
    _log.info("%s refused %s: %s", request.url.path, code, message)
    return problem_response(request, code=code, status=status, detail=message)


def _base_app(
    title: str,
    *,
    max_body: int,
    hsts: bool,
    client_name: str | None,
    audit: AuditSink | None,
    participants: frozenset[str] = frozenset(),
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if isinstance(audit, LedgerAuditSink):  # a clean stop: no entry outside a signed head
            audit.sign_pending()

    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    install_problem_handlers(app)
    app.add_exception_handler(SecureFedError, _on_party_error)
    app.add_exception_handler(CryptoError, _on_party_error)
    if client_name is not None and participants:  # the notice route serves participants
        app.add_middleware(
            _NoticeGate,
            party=title,
            expected=client_name,
            participants=participants,
            audit=audit,
        )
    elif client_name is not None:  # inside the service middleware: its headers apply
        app.add_middleware(PeerGate, party=title, expected=client_name, audit=audit)
    app.add_middleware(ServiceMiddleware, max_body=max_body, metrics=None, hsts=hsts)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "party": title}

    return app


def _attestation(request: Request) -> bytes | None:
    """Return the verifier's attestation a ``/v1/decrypt`` request carries (or ``None``).

    A header that is not hex is handed on as its raw bytes: the key authority refuses
    (and audits) it as an attestation that does not parse.
    """
    raw = request.headers.get(ATTESTATION_HEADER)
    if raw is None:
        return None
    try:
        return bytes.fromhex(raw)
    except ValueError:
        return raw.encode("utf-8", "replace")


def _route(
    app: FastAPI,
    path: str,
    handler: Callable[..., bytes],
    lock: threading.Lock,
    *,
    attested: bool = False,
) -> None:
    def serve(body: bytes, attestation: bytes | None) -> bytes:
        with lock:  # the party's round state is not shared between threads
            return handler(body, attestation) if attested else handler(body)

    async def endpoint(request: Request) -> Response:
        kind = request.headers.get("content-type", "").split(";")[0].strip()
        if kind != OCTET_STREAM:
            return problem_response(
                request,
                code=RequestInvalid.code,
                status=415,
                detail=f"the body must be {OCTET_STREAM}, not {kind or 'untyped'}",
            )
        attestation = _attestation(request) if attested else None
        reply = await run_in_threadpool(serve, await request.body(), attestation)
        return Response(content=reply, media_type=OCTET_STREAM)

    app.add_api_route(path, endpoint, methods=["POST"], name=path.strip("/").replace("/", "_"))


def create_keyauthority_app(
    party: KeyAuthorityParty,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    hsts: bool = True,
    client_name: str | None = None,
    audit: AuditSink | None = None,
) -> FastAPI:
    """Return the key authority's application over ``party``'s byte handlers.

    With ``client_name`` every request must come over mutual TLS with a client
    certificate of that name (served by :func:`api.services.run.serve_app`);
    any other is a 403 ``DEPLOY_PEER_REFUSED`` problem, recorded in ``audit``.
    """
    authority = party.authority
    app = _base_app(
        "keyauthority",
        max_body=max_body,
        hsts=hsts,
        client_name=client_name,
        audit=audit,
        participants=frozenset(authority.enrolled or ()),
    )
    lock = threading.Lock()
    _route(app, NOTICE_PATH, authority.accept_notice, lock)
    # the verifier's attestation travels with the request (ckks: required when pinned)
    _route(app, AUTHORITY_PATHS["decrypt"], party.decrypt, lock, attested=True)
    handlers: Mapping[str, Handler] = {
        "plan": party.plan,
        "deal": party.deal_packed,
        "deal_range": party.deal_range_packed,
        "deal_compare": party.deal_compare_packed,
        "deal_masks": party.deal_masks,  # one blob: the aggregator's input-mask shares
    }
    for name, handler in handlers.items():
        _route(app, AUTHORITY_PATHS[name], handler, lock)

    @app.get("/v1/contexts/{role}")
    def context(role: str, request: Request) -> Response:
        try:
            data = party.public_context(role)
        except KeyDirectoryInvalid as exc:
            return problem_response(request, code=NotFound.code, status=404, detail=exc.message)
        return Response(content=data, media_type=OCTET_STREAM)

    return app


def create_helper_app(
    helper: HelperParty,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    hsts: bool = True,
    client_name: str | None = None,
    audit: AuditSink | None = None,
) -> FastAPI:
    """Return the helper's application over :meth:`HelperParty.handle`.

    ``client_name`` and ``audit`` as in :func:`create_keyauthority_app`.
    """
    app = _base_app(
        "helper",
        max_body=max_body,
        hsts=hsts,
        client_name=client_name,
        audit=audit,
        participants=frozenset(helper.secrets),
    )
    lock = threading.Lock()
    _route(app, HELPER_PATH, helper.handle, lock)
    _route(app, NOTICE_PATH, helper.accept_notice, lock)
    return app
