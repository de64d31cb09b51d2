"""Console page: chain status (the whole audit log verified now, and the latest signed head).

``GET /console/chain`` runs :func:`privacy_ledger.verify_log` (through
:func:`api.rest.console.audit_view.chain_status`) and shows its result: the
number of entries and signed heads checked, the Merkle root, or the typed
error naming the first bad entry or head.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from api.rest.auth import context
from api.rest.console.access import Officer
from api.rest.console.audit_view import chain_status
from api.rest.console.party_view import party_view
from api.rest.console.render import page

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/console/chain", response_class=HTMLResponse)
def chain(request: Request, principal: Officer) -> HTMLResponse:
    """Verify the audit log now and show the result with the latest signed tree head."""
    ctx = context(request)
    status = chain_status(ctx)
    return page(
        request,
        "chain.html",
        title="Chain status",
        principal=principal,
        status=status,
        parties=party_view(ctx),
    )
