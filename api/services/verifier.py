"""The verifier service (ckks mode): a FastAPI application over the verifier's byte handlers.

Like the key authority and the helper (:mod:`api.services.apps`), it serves one client,
the aggregator, over mutual TLS (:class:`api.services.peer.PeerGate`: any other
certificate name is a 403 ``DEPLOY_PEER_REFUSED`` problem and an audit event), refuses
bodies over its size limit and answers a refusal as an RFC 9457 problem whose ``code``
is the verifier's typed error (``VERIFIER_UPLOAD_REFUSED``,
``VERIFIER_ATTESTATION_REFUSED``), raised again on the aggregator's side by
:class:`secure_fed.deploy.transport.RemoteParty`. Requests are served one at a time
(the verifier keeps the rounds' uploads).

Routes: ``POST /v1/verifier/upload`` (a forwarded upload:
:func:`~secure_fed.deploy.transport.pack_upload`; reply the sender's id),
``POST /v1/verifier/attest`` (a signed decryption request; reply the attestation),
``GET /healthz``. Served by ``secure-fed verifier serve`` (:mod:`api.cli.verifier`).
"""

from __future__ import annotations

import threading

from fastapi import FastAPI

from api.services.apps import DEFAULT_MAX_BODY, _base_app, _route
from secure_fed.deploy.transport import VERIFIER_PATHS
from secure_fed.deploy.verifier_party import VerifierParty
from secure_fed.secure.audit import AuditSink

__all__ = ["create_verifier_app"]


def create_verifier_app(
    party: VerifierParty,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    hsts: bool = True,
    client_name: str | None = None,
    audit: AuditSink | None = None,
) -> FastAPI:
    """Return the verifier's application over ``party``'s byte handlers.

    ``client_name`` and ``audit`` as in :func:`api.services.apps.create_keyauthority_app`.
    """
    app = _base_app("verifier", max_body=max_body, hsts=hsts, client_name=client_name, audit=audit)
    lock = threading.Lock()
    _route(app, VERIFIER_PATHS["upload"], party.upload, lock)
    _route(app, VERIFIER_PATHS["attest"], party.attest, lock)
    return app
