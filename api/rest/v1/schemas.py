"""Response and request bodies of the ``/v1`` routes (pydantic models).

Epsilons are exact decimals sent as strings (``"7.93"``): a budget is never
compared through a float that may have rounded (docs/audit/dp-accounting.md).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from privacy_ledger import BudgetStatus, Reservation
from privacy_ledger.budget.empirical import NOT_AUDITED, AuditedBudget

__all__ = [
    "BudgetDetail",
    "BudgetList",
    "BudgetSet",
    "BudgetSummary",
    "EmpiricalAuditOut",
    "ReceiptOut",
    "ReservationList",
    "ReservationOut",
    "RoundEpsilonOut",
    "ID_PATTERN",
]

#: Identifiers of participants, assets and rounds (privacy_ledger.budget.participants).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmpiricalAuditOut(BaseModel):
    """The newest empirical privacy audit of a budget (its ``budget.audited`` log entry)."""

    entry: int = Field(description="Index of the budget.audited entry in the audit log.")
    time: str = Field(description="When the entry was written (RFC 3339, UTC).")
    label: str = Field(description="e.g. 'empirical lower bound (95%, 1000 canaries)'.")
    epsilon_lower_bound: str = Field(description="The audit's lower bound on epsilon.")
    epsilon_accounted: str | None = Field(
        description="The ledger's own epsilon over the audited rounds (null: not computable)."
    )
    epsilon_accounted_stated: str = Field(
        description="The accounted epsilon the auditor stated in the entry."
    )
    exceeds_accounted: bool | None = Field(
        description="Lower bound above the ledger's epsilon: DP was not applied as charged."
    )
    rounds_from: str
    rounds_to: str
    canaries: int
    guesses: int
    correct: int
    score: str
    confidence: str
    delta: str
    method: str
    audits: int = Field(description="How many budget.audited entries this budget has.")

    @classmethod
    def of(cls, audited: AuditedBudget) -> EmpiricalAuditOut | None:
        """Build from an :class:`~privacy_ledger.budget.empirical.AuditedBudget` or None."""
        if audited.recorded is None:
            return None
        a = audited.recorded.audit
        accounted = audited.epsilon_accounted
        return cls(
            entry=audited.recorded.index,
            time=audited.recorded.time,
            label=a.label,
            epsilon_lower_bound=str(a.epsilon_lower_bound),
            epsilon_accounted=None if accounted is None else str(accounted),
            epsilon_accounted_stated=str(a.epsilon_accounted),
            exceeds_accounted=audited.exceeds,
            rounds_from=a.rounds_from,
            rounds_to=a.rounds_to,
            canaries=a.canaries,
            guesses=a.guesses,
            correct=a.correct,
            score=a.score,
            confidence=str(a.confidence),
            delta=str(a.delta),
            method=a.method,
            audits=audited.audits,
        )


class BudgetSummary(BaseModel):
    """Limit, spent, reserved and remaining epsilon of one participant's asset.

    Beside the accounted epsilon, the newest empirical privacy audit read from the
    audit log (``empirical_audit``; ``null`` and ``empirical_label`` "not audited"
    when none was recorded).
    """

    participant_id: str
    asset_id: str
    accountant: str
    delta: float
    limit: str = Field(description="Epsilon limit (exact decimal).")
    spent: str = Field(description="Epsilon of the committed history (rounded up).")
    reserved: str = Field(description="Extra epsilon held by active reservations.")
    remaining: str = Field(description="limit - spent - reserved, never below zero.")
    active_reservations: int
    empirical_label: str = Field(
        default=NOT_AUDITED,
        description="Label of the empirical lower bound, e.g. 'empirical lower bound "
        "(95%, 1000 canaries)', or 'not audited'.",
    )
    empirical_audit: EmpiricalAuditOut | None = Field(
        default=None, description="The newest empirical privacy audit; null: not audited."
    )

    @classmethod
    def of(cls, status: BudgetStatus, audited: AuditedBudget | None = None) -> BudgetSummary:
        """Build from the ledger's :class:`~privacy_ledger.BudgetStatus` and audit, if any."""
        return cls(
            participant_id=status.participant_id,
            asset_id=status.asset_id,
            accountant=status.accountant,
            delta=status.delta,
            limit=str(status.limit),
            spent=str(status.spent),
            reserved=str(status.reserved),
            remaining=str(status.remaining),
            active_reservations=status.active_reservations,
            empirical_label=NOT_AUDITED if audited is None else audited.label,
            empirical_audit=None if audited is None else EmpiricalAuditOut.of(audited),
        )


class RoundEpsilonOut(BaseModel):
    """Cumulative epsilon after one committed round."""

    round_id: str | None
    epsilon_after: str


class BudgetDetail(BudgetSummary):
    """A budget with the epsilon after each committed round (whole-history accounting)."""

    per_round: list[RoundEpsilonOut]

    @classmethod
    def of(cls, status: BudgetStatus, audited: AuditedBudget | None = None) -> BudgetDetail:
        """Build from the ledger's :class:`~privacy_ledger.BudgetStatus` and audit, if any."""
        summary = BudgetSummary.of(status, audited)
        rounds = [RoundEpsilonOut(round_id=r, epsilon_after=str(e)) for r, e in status.per_round]
        return cls(**dict(summary), per_round=rounds)


class BudgetList(BaseModel):
    """Budgets visible to the caller (a participant sees only its own)."""

    budgets: list[BudgetSummary]


class BudgetSet(_Strict):
    """New limit of a budget (administrators)."""

    epsilon: str = Field(
        pattern=r"^[0-9]{1,6}(\.[0-9]{1,12})?$", description="Epsilon limit as a decimal string."
    )
    delta: float = Field(gt=0, lt=1)
    accountant: str = Field(default="rdp", pattern="^(rdp|prv)$")


class ReservationOut(BaseModel):
    """One privacy event of a budget (reserved, committed, aborted or expired)."""

    id: str
    participant_id: str
    asset_id: str
    round_id: str | None
    state: str
    epsilon_projected: str
    noise_multiplier: float
    sample_rate: float
    steps: int
    max_grad_norm: float
    delta: float
    mechanism: str
    created_at: float
    expires_at: float
    resolved_at: float | None

    @classmethod
    def of(cls, r: Reservation) -> ReservationOut:
        """Build from the ledger's :class:`~privacy_ledger.Reservation`."""
        return cls(
            id=r.id,
            participant_id=r.participant_id,
            asset_id=r.asset_id,
            round_id=r.round_id,
            state=r.state,
            epsilon_projected=str(r.epsilon_projected),
            noise_multiplier=r.event.noise_multiplier,
            sample_rate=r.event.sample_rate,
            steps=r.event.steps,
            max_grad_norm=r.event.max_grad_norm,
            delta=r.event.delta,
            mechanism=r.event.mechanism,
            created_at=r.created_at,
            expires_at=r.expires_at,
            resolved_at=r.resolved_at,
        )


class ReceiptOut(BaseModel):
    """A signed budget receipt (``u16 length | canonical JSON body | DER SM2``, base64)."""

    participant_id: str
    asset_id: str
    round_id: str
    receipt_b64: str
    public_key_pem: str


class ReservationList(BaseModel):
    """The privacy events of one budget, oldest first."""

    reservations: list[ReservationOut]
