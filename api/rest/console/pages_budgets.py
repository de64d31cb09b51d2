"""Console pages: budgets per participant and one budget's history.

``GET /console/budgets`` lists every registered participant with the limit,
spent, reserved and remaining epsilon of each of its budgets and a chart of
epsilon over rounds; ``GET /console/budgets/{participant}/{asset}`` adds the
per-round table and the budget's privacy events. Every number comes from
:class:`privacy_ledger.budget.queries.BudgetQueries` (through
:mod:`api.rest.console.ledger_view`); the empirical lower bound shown beside the
spent epsilon from the budget's newest ``budget.audited`` log entry ("not audited"
when there is none).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from api.rest.auth import context
from api.rest.console.access import Officer
from api.rest.console.ledger_view import (
    budget_audit,
    budget_detail,
    participant_budgets,
    stored_rounds,
)
from api.rest.console.render import page
from api.rest.v1.schemas import ID_PATTERN
from privacy_ledger.errors import BudgetNotSet

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

Id = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]


@router.get("/console/budgets", response_class=HTMLResponse)
def budgets(request: Request, principal: Officer) -> HTMLResponse:
    """Show every participant's budgets with remaining epsilon and a chart over rounds."""
    people = participant_budgets(context(request))
    return page(request, "budgets.html", title="Budgets", principal=principal, people=people)


@router.get("/console/budgets/{participant_id}/{asset_id}", response_class=HTMLResponse)
def budget(request: Request, participant_id: Id, asset_id: Id, principal: Officer) -> HTMLResponse:
    """Show one budget: its status, epsilon after each round and its privacy events."""
    ctx = context(request)
    try:
        status, events, chart = budget_detail(ctx, participant_id, asset_id)
    except BudgetNotSet:
        return page(
            request,
            "error.html",
            title="No such budget",
            principal=principal,
            status_code=404,
            message=f"Participant {participant_id} has no budget for asset {asset_id}.",
            back="/console/budgets",
        )
    return page(
        request,
        "budget.html",
        title=f"Budget of {participant_id} / {asset_id}",
        principal=principal,
        status=status,
        used=status.limit - status.remaining,
        events=events,
        chart=chart,
        audited=budget_audit(ctx, participant_id, asset_id),
        stored=stored_rounds(ctx, [r.round_id for r in status.per_round]),
    )
