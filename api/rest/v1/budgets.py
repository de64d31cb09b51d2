"""``/v1/budgets``: limit, spent, reserved, remaining, per-round history; reservations, receipts.

Thin router over :class:`privacy_ledger.budget.queries.BudgetQueries` (read)
and :func:`privacy_ledger.budget.empirical.audited_budgets` (each budget's newest
empirical privacy audit, read from its ``budget.audited`` log entry, beside the
accounted epsilon)
and :meth:`privacy_ledger.PrivacyLedger.set_budget` (administrators; audited
by the ledger as ``budget.set`` in the same transaction). Receipts are signed by
:class:`privacy_ledger.budget.receipts.ReceiptIssuer` from the ledger's committed
rows. A participant reads only its own budgets and receipts: another
participant's id is a 403, audited.
"""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from sqlalchemy import select

from api.rest.auth import ReadBudgets, WriteBudgets, context
from api.rest.errors import ServiceMisconfigured
from api.rest.problems import problem_responses
from api.rest.v1.schemas import (
    ID_PATTERN,
    BudgetDetail,
    BudgetList,
    BudgetSet,
    BudgetSummary,
    ReceiptOut,
    ReservationList,
    ReservationOut,
)
from privacy_ledger import PrivacyLedger
from privacy_ledger.budget.empirical import AuditedBudget, audited_budgets
from privacy_ledger.models import Budget

__all__ = ["router"]

router = APIRouter(prefix="/budgets", tags=["budgets"], responses=problem_responses(401, 403))

ParticipantId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
AssetId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
RoundId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
_STATES = "^(reserved|committed|aborted|expired)$"


def _audited(
    ledger: PrivacyLedger, participant_id: str | None
) -> dict[tuple[str, str], AuditedBudget]:
    return {
        (b.participant, b.asset): b for b in audited_budgets(ledger, participant=participant_id)
    }


@router.get("", response_model=BudgetList)
def list_budgets(request: Request, principal: ReadBudgets) -> BudgetList:
    """Return every budget the caller may see (a participant: its own), with totals."""
    ctx = context(request)
    stmt = select(Budget.participant_id, Budget.asset_id).order_by(
        Budget.participant_id, Budget.asset_id
    )
    if not principal.sees_everyone:
        stmt = stmt.where(Budget.participant_id == principal.participant_id)
    with ctx.sessions() as session:
        keys = list(session.execute(stmt).all())
    audits = _audited(ctx.ledger, None if principal.sees_everyone else principal.participant_id)
    return BudgetList(
        budgets=[
            BudgetSummary.of(ctx.ledger.budget_status(p, a), audits.get((p, a))) for p, a in keys
        ]
    )


@router.get("/{participant_id}", response_model=BudgetList, responses=problem_responses(404))
def participant_budgets(
    request: Request, participant_id: ParticipantId, principal: ReadBudgets
) -> BudgetList:
    """Return the budgets of one participant (404 if it is not registered)."""
    principal.require_participant(participant_id)
    ledger = context(request).ledger
    assets = ledger.budget_assets(participant_id)
    audits = _audited(ledger, participant_id)
    return BudgetList(
        budgets=[
            BudgetSummary.of(
                ledger.budget_status(participant_id, a), audits.get((participant_id, a))
            )
            for a in assets
        ]
    )


@router.get(
    "/{participant_id}/{asset_id}", response_model=BudgetDetail, responses=problem_responses(404)
)
def budget(
    request: Request, participant_id: ParticipantId, asset_id: AssetId, principal: ReadBudgets
) -> BudgetDetail:
    """Return one budget with the epsilon after each committed round and its newest audit."""
    principal.require_participant(participant_id)
    ledger = context(request).ledger
    status = ledger.budget_status(participant_id, asset_id)
    return BudgetDetail.of(status, _audited(ledger, participant_id).get((participant_id, asset_id)))


@router.put(
    "/{participant_id}/{asset_id}",
    response_model=BudgetDetail,
    responses=problem_responses(404, 422),
)
def set_budget(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    body: BudgetSet,
    _principal: WriteBudgets,
) -> BudgetDetail:
    """Create or change a budget (administrators; written to the audit log as ``budget.set``)."""
    ledger = context(request).ledger
    ledger.set_budget(
        participant_id, asset_id, epsilon=body.epsilon, delta=body.delta, accountant=body.accountant
    )
    status = ledger.budget_status(participant_id, asset_id)
    return BudgetDetail.of(status, _audited(ledger, participant_id).get((participant_id, asset_id)))


@router.get(
    "/{participant_id}/{asset_id}/receipts/{round_id}",
    response_model=ReceiptOut,
    responses=problem_responses(404, 503),
)
def receipt(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    round_id: RoundId,
    principal: ReadBudgets,
) -> ReceiptOut:
    """Return a signed budget receipt for the participant's committed charge of a round."""
    principal.require_participant(participant_id)
    issuer = context(request).receipts
    if issuer is None:
        raise ServiceMisconfigured("this service issues no receipts (api_receipt_key_file unset)")
    data = issuer.issue(participant_id=participant_id, asset_id=asset_id, round_id=round_id)
    return ReceiptOut(
        participant_id=participant_id,
        asset_id=asset_id,
        round_id=round_id,
        receipt_b64=base64.b64encode(data).decode("ascii"),
        public_key_pem=issuer.public_key.to_pem().decode("ascii"),
    )


@router.get(
    "/{participant_id}/{asset_id}/reservations",
    response_model=ReservationList,
    responses=problem_responses(404),
)
def reservations(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    principal: ReadBudgets,
    state: Annotated[str | None, Query(pattern=_STATES)] = None,
) -> ReservationList:
    """Return the privacy events of one budget (optionally of one state), oldest first."""
    principal.require_participant(participant_id)
    states = None if state is None else (state,)
    events = context(request).ledger.events(participant_id, asset_id, states=states)
    return ReservationList(reservations=[ReservationOut.of(r) for r in events])
