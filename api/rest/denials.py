"""Every denial is an audit event: ``access.denied`` in the tamper-evident log.

A 401 or 403 answer of the service appends one ``access.denied`` entry
(``docs/audit/events.md``) naming the actor (token id, or ``anonymous``), its
role, the method, the path, the error code and the status, in its own
transaction, before the problem is returned. The entry is written through the
same :meth:`privacy_ledger.AuditLog.append` path as every budget change, and a
signed tree head is added when one is due.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.rest.errors import AccessDenied
from api.rest.problems import render_error

__all__ = ["record_denial", "install_denial_handler"]

logger = logging.getLogger(__name__)

_MAX_PATH = 200


def record_denial(request: Request, exc: AccessDenied, status: int) -> int:
    """Append one ``access.denied`` entry for this request and return its index."""
    from api.rest.auth import Principal  # avoid an import cycle (auth raises denials)

    ctx = request.app.state.ctx
    principal = getattr(request.state, "principal", None)
    actor = principal.token_id if isinstance(principal, Principal) else "anonymous"
    role = principal.role if isinstance(principal, Principal) else "none"
    path = request.url.path[:_MAX_PATH]
    fields: dict[str, object] = {
        "actor": actor,
        "role": role,
        "method": request.method[:16],
        "resource": path,
        "reason": exc.reason,
        "status": status,
        "party": "api",
    }
    with ctx.sessions() as session, session.begin():
        index: int = ctx.audit.append(
            session, event="access.denied", subject=f"api:{path}", fields=fields
        )
        ctx.audit.checkpoint(session)
    logger.info(
        "denied %s %s to %s (%s), audit entry %d", request.method, path, actor, exc.reason, index
    )
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is not None:
        metrics.denials.labels(reason=exc.reason).inc()
    return index


async def _on_denied(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AccessDenied)
    response = render_error(request, exc)
    await run_in_threadpool(record_denial, request, exc, response.status_code)
    return response


def install_denial_handler(app: FastAPI) -> None:
    """Audit and render every :class:`~api.rest.errors.AccessDenied` raised by a route."""
    app.add_exception_handler(AccessDenied, _on_denied)
