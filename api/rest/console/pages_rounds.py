"""Console pages: the round timeline, one round, outlier decisions and the decryption log.

Rounds, their stored decisions, uploads and decryption requests come from
:class:`privacy_ledger.RoundStore`; the outlier decisions and decryption
events recorded in the audit log are derived by the compliance report's
:class:`compliance.derive.Deriver` (through :mod:`api.rest.console.audit_view`),
so both views of a round can be compared side by side; the key authority's and
helper's own logs are read and verified by :mod:`api.rest.console.party_view`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse

from api.rest.auth import context
from api.rest.console.access import Officer
from api.rest.console.audit_view import MAX_AUDIT_ROWS, audit_rows
from api.rest.console.ledger_view import MAX_ROUNDS, all_decryptions, round_detail, round_timeline
from api.rest.console.party_view import party_view
from api.rest.console.render import page
from api.rest.v1.schemas import ID_PATTERN
from privacy_ledger.errors import RoundUnknown

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

RoundId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]


@router.get("/console/rounds", response_class=HTMLResponse)
def rounds(request: Request, principal: Officer) -> HTMLResponse:
    """Show the stored rounds, newest first, with stage, times and counts."""
    timeline = round_timeline(context(request))
    return page(
        request,
        "rounds.html",
        title="Round timeline",
        principal=principal,
        rounds=timeline,
        limit=MAX_ROUNDS,
    )


@router.get("/console/rounds/{round_id}", response_class=HTMLResponse)
def round_page(request: Request, round_id: RoundId, principal: Officer) -> HTMLResponse:
    """Show one round: decisions applied and logged, uploads, decryption log."""
    ctx = context(request)
    try:
        detail = round_detail(ctx, round_id)
    except RoundUnknown:
        return page(
            request,
            "error.html",
            title="No such round",
            principal=principal,
            status_code=404,
            message=f"No round {round_id} is stored.",
            back="/console/rounds",
        )
    return page(
        request,
        "round.html",
        title=f"Round {round_id}",
        principal=principal,
        detail=detail,
        audit=audit_rows(ctx, rounds=detail.aliases),
        parties=party_view(ctx, rounds=detail.aliases),
    )


@router.get("/console/outliers", response_class=HTMLResponse)
def outliers(request: Request, principal: Officer) -> HTMLResponse:
    """Show every outlier decision the audit log records."""
    rows = audit_rows(context(request))["outlier_decisions"]
    return page(
        request,
        "outliers.html",
        title="Outlier decisions",
        principal=principal,
        rows=rows,
        limit=MAX_AUDIT_ROWS,
    )


@router.get("/console/decryptions", response_class=HTMLResponse)
def decryptions(request: Request, principal: Officer) -> HTMLResponse:
    """Show the decryption requests of the stored rounds and the logged decryption events."""
    ctx = context(request)
    return page(
        request,
        "decryptions.html",
        title="Decryption log",
        principal=principal,
        requests=all_decryptions(ctx, round_timeline(ctx)),
        events=audit_rows(ctx)["decryptions"],
        parties=party_view(ctx),
    )
