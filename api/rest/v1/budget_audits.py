"""``/v1/budgets/{participant_id}/{asset_id}/audits``: record and list empirical privacy audits.

A participant that audits its own DP-SGD (a one-run audit, Steinke, Nasr and
Jagielski 2023; :mod:`secure_fed.learning.privacy_audit`) on its own machine
records the result here, so that it lands in the federation's signed audit log
as a ``budget.audited`` entry exactly as an in-process ledger writes it
(:func:`privacy_ledger.budget.empirical.record_empirical_audit_once`). The
server takes the participant and asset from the path and computes the
accounted epsilon itself over the audited rounds
(:func:`~privacy_ledger.budget.empirical.accounted_epsilon_over`), so the entry
never carries a figure the participant chose for the ledger's side.

Who: ``budgets:charge``, as for the charges of the same training (a participant
its own budget only, another participant's id is a 403, audited; administrators
any). Reading the list is ``budgets:read`` (a participant: its own).

A bound above the accounted epsilon is stored like any other (it is the
evidence that DP was not applied as charged) and flagged ``exceeds_accounted``.
Resending exactly the same body for the same budget answers the entry already
written (``created: false``) and appends nothing, so a client may retry a lost
answer; the check runs under the budget's lock, in the transaction that would append.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Path, Request

from api.rest.auth import ChargeBudgets, ReadBudgets, context
from api.rest.problems import problem_responses
from api.rest.v1.budget_audit_schemas import (
    AuditIn,
    BudgetAuditList,
    BudgetAuditOut,
    BudgetAuditRecorded,
)
from api.rest.v1.schemas import ID_PATTERN
from privacy_ledger import PrivacyLedger
from privacy_ledger.budget.empirical import (
    EmpiricalAudit,
    RecordedAudit,
    accounted_epsilon_over,
    empirical_audits,
    record_empirical_audit_once,
)
from privacy_ledger.errors import LedgerError

__all__ = ["router"]

router = APIRouter(prefix="/budgets", tags=["budgets"], responses=problem_responses(401, 403))

ParticipantId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
AssetId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
_AUDITS = "/{participant_id}/{asset_id}/audits"


def _over(ledger: PrivacyLedger, audit: EmpiricalAudit) -> Decimal | None:
    """Return the ledger's epsilon over the audit's rounds now (None: no longer committed)."""
    try:
        return accounted_epsilon_over(
            ledger, audit.participant, audit.asset, audit.rounds_from, audit.rounds_to
        )
    except LedgerError:
        return None


@router.post(
    _AUDITS,
    response_model=BudgetAuditRecorded,
    status_code=201,
    responses=problem_responses(404, 422),
)
def record_audit(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    body: AuditIn,
    principal: ChargeBudgets,
) -> BudgetAuditRecorded:
    """Record an empirical privacy audit of this budget as a signed ``budget.audited`` entry.

    404 ``LEDGER_BUDGET_NOT_SET`` for an unknown budget; 422
    ``LEDGER_EMPIRICAL_AUDIT_INVALID`` for figures that disagree or rounds the
    ledger has no committed charge for (nothing is written). The same body
    again answers the same entry (``created: false``).
    """
    principal.require_participant(participant_id)
    ledger = context(request).ledger
    accounted = accounted_epsilon_over(
        ledger, participant_id, asset_id, body.rounds_from, body.rounds_to
    )
    audit = body.audit(participant_id, asset_id, accounted)
    index, created = record_empirical_audit_once(ledger, audit)
    recorded = next(
        r
        for r in empirical_audits(ledger, participant=participant_id, asset=asset_id)
        if r.index == index
    )
    out = BudgetAuditOut.of(recorded, _over(ledger, recorded.audit))
    return BudgetAuditRecorded(**dict(out), created=created)


@router.get(_AUDITS, response_model=BudgetAuditList, responses=problem_responses(404))
def list_audits(
    request: Request, participant_id: ParticipantId, asset_id: AssetId, principal: ReadBudgets
) -> BudgetAuditList:
    """Return every empirical audit of this budget, oldest first, each beside the ledger's epsilon.

    404 ``LEDGER_BUDGET_NOT_SET`` for an unknown budget.
    """
    principal.require_participant(participant_id)
    ledger = context(request).ledger
    spent = ledger.epsilon_spent(participant_id, asset_id)
    found: list[RecordedAudit] = empirical_audits(
        ledger, participant=participant_id, asset=asset_id
    )
    return BudgetAuditList(
        participant_id=participant_id,
        asset_id=asset_id,
        epsilon_spent=str(spent),
        audits=[BudgetAuditOut.of(r, _over(ledger, r.audit)) for r in found],
    )
