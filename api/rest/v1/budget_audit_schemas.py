"""Request and response bodies of the empirical-audit routes (:mod:`api.rest.v1.budget_audits`).

An audit travels as the fields of its ``budget.audited`` entry
(:class:`privacy_ledger.budget.empirical.EmpiricalAudit`) without the three the
server fills in: the participant and asset come from the path, the accounted
epsilon from the ledger. Decimals are strings (a JSON number is refused), counts
are integers; the ledger checks that the figures agree with each other.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from api.rest.v1.schemas import ID_PATTERN
from privacy_ledger.budget.empirical import EmpiricalAudit, RecordedAudit

__all__ = ["AuditIn", "BudgetAuditList", "BudgetAuditOut", "BudgetAuditRecorded"]

#: A non-negative decimal as a string (``"0.95"``, ``"0.00001"``, ``"1E-7"``).
_DECIMAL = r"^[0-9]{1,12}(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,3})?$"
#: Names of the membership score and of the audit procedure (as the ledger allows).
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,63}$"
_MAX_CANARIES = 10**9


class AuditIn(BaseModel):
    """One empirical privacy audit of the participant's training, as its auditor measured it.

    The ledger refuses figures that disagree (``correct > guesses``, a confidence
    outside (0, 1)...) with ``LEDGER_EMPIRICAL_AUDIT_INVALID``, and rounds it has
    no committed charge for with the same code.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    rounds_from: str = Field(
        pattern=ID_PATTERN, max_length=128, description="Ledger label of the first audited charge."
    )
    rounds_to: str = Field(
        pattern=ID_PATTERN, max_length=128, description="Ledger label of the last audited charge."
    )
    canaries: int = Field(ge=1, le=_MAX_CANARIES, description="Canaries m (each kept w.p. 1/2).")
    guesses: int = Field(ge=0, le=_MAX_CANARIES, description="Guesses made (no abstentions).")
    correct: int = Field(ge=0, le=_MAX_CANARIES, description="Guesses that were right.")
    score: str = Field(pattern=_NAME, description="The membership score, e.g. 'loss'.")
    confidence: str = Field(pattern=_DECIMAL, max_length=48, description="e.g. '0.95'.")
    delta: str = Field(pattern=_DECIMAL, max_length=48, description="Delta of the bound.")
    epsilon_lower_bound: str = Field(
        pattern=_DECIMAL, max_length=48, description="The audit's lower bound on epsilon."
    )
    method: str = Field(
        default="steinke-nasr-jagielski-2023",
        pattern=_NAME,
        description="The audit procedure.",
    )

    def audit(self, participant_id: str, asset_id: str, accounted: Decimal) -> EmpiricalAudit:
        """Return the ledger's audit of this budget, with the ledger's ``accounted`` epsilon.

        Raises
        ------
        EmpiricalAuditInvalid
            The figures disagree (the ledger's own checks).
        """
        return EmpiricalAudit(
            participant=participant_id,
            asset=asset_id,
            rounds_from=self.rounds_from,
            rounds_to=self.rounds_to,
            canaries=self.canaries,
            guesses=self.guesses,
            correct=self.correct,
            score=self.score,
            confidence=Decimal(self.confidence),
            delta=Decimal(self.delta),
            epsilon_lower_bound=Decimal(self.epsilon_lower_bound),
            epsilon_accounted=accounted,
            method=self.method,
        )


class BudgetAuditOut(BaseModel):
    """One ``budget.audited`` entry of a budget, beside the ledger's epsilon over its rounds."""

    entry: int = Field(description="Index of the budget.audited entry in the audit log.")
    time: str = Field(description="When the entry was written (RFC 3339, UTC).")
    participant_id: str
    asset_id: str
    label: str = Field(description="e.g. 'empirical lower bound (95%, 1000 canaries)'.")
    rounds_from: str
    rounds_to: str
    canaries: int
    guesses: int
    correct: int
    score: str
    confidence: str
    delta: str
    epsilon_lower_bound: str = Field(description="The audit's lower bound on epsilon.")
    epsilon_accounted_stated: str = Field(
        description="The accounted epsilon written in the entry (the ledger's when it was written)."
    )
    epsilon_accounted: str | None = Field(
        description="The ledger's own epsilon over the audited rounds now (null: not computable)."
    )
    exceeds_accounted: bool | None = Field(
        description="Lower bound above the ledger's epsilon: DP was not applied as charged."
    )
    method: str

    @classmethod
    def of(cls, recorded: RecordedAudit, accounted: Decimal | None) -> BudgetAuditOut:
        """Build from a recorded audit and the ledger's epsilon over its rounds (or None)."""
        a = recorded.audit
        return cls(
            entry=recorded.index,
            time=recorded.time,
            participant_id=a.participant,
            asset_id=a.asset,
            label=a.label,
            rounds_from=a.rounds_from,
            rounds_to=a.rounds_to,
            canaries=a.canaries,
            guesses=a.guesses,
            correct=a.correct,
            score=a.score,
            confidence=str(a.confidence),
            delta=str(a.delta),
            epsilon_lower_bound=str(a.epsilon_lower_bound),
            epsilon_accounted_stated=str(a.epsilon_accounted),
            epsilon_accounted=None if accounted is None else str(accounted),
            exceeds_accounted=None if accounted is None else a.epsilon_lower_bound > accounted,
            method=a.method,
        )


class BudgetAuditRecorded(BudgetAuditOut):
    """The stored audit, and whether this request wrote it (``false``: a resend of it)."""

    created: bool = Field(description="False when an identical audit was already recorded.")


class BudgetAuditList(BaseModel):
    """Every empirical audit of one budget, oldest first, and its committed epsilon."""

    participant_id: str
    asset_id: str
    epsilon_spent: str = Field(description="Epsilon of the budget's whole committed history.")
    audits: list[BudgetAuditOut]
