"""Console pages: the log-in form and the landing page.

``GET /console/login`` shows the form posting to ``POST /console/login``
(:mod:`api.rest.session`, which exchanges an API token for the session
cookie); ``GET /console/`` summarises budgets, rounds and the latest signed
tree head and offers the report exports (``GET /v1/reports/export``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from api.rest.auth import context
from api.rest.console.access import Officer
from api.rest.console.audit_view import latest_head
from api.rest.console.ledger_view import participant_budgets, round_count, round_timeline
from api.rest.console.render import page

__all__ = ["router"]

router = APIRouter(include_in_schema=False)


@router.get("/console/login", response_class=HTMLResponse)
def login_form(request: Request) -> HTMLResponse:
    """Show the log-in form (``?failed=1`` after a refused token)."""
    failed = request.query_params.get("failed") == "1"
    return page(request, "login.html", title="Log in", failed=failed)


@router.get("/console/", response_class=HTMLResponse)
def index(request: Request, principal: Officer) -> HTMLResponse:
    """Show the overview: counts, the budgets with least epsilon left, exports."""
    ctx = context(request)
    people = participant_budgets(ctx)
    budgets = sorted(
        (b for p in people for b in p.budgets),
        key=lambda b: (b.remaining, b.participant_id, b.asset_id),
    )
    return page(
        request,
        "index.html",
        title="Overview",
        principal=principal,
        participants=len(people),
        budgets=budgets,
        rounds=round_count(ctx),
        latest=round_timeline(ctx, limit=1),
        head=latest_head(ctx),
    )
