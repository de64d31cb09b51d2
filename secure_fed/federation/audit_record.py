"""Record a participant's empirical privacy audit in the privacy ledger (``budget.audited``).

:mod:`secure_fed.learning.privacy_audit` measures; this module writes the result with
the ledger's own writer (:func:`privacy_ledger.budget.empirical.record_empirical_audit`),
the accounted epsilon beside the bound being the ledger's recomputation over exactly
the audited charges. It lives above the learning code, which imports no ledger service.
"""

from __future__ import annotations

from decimal import Decimal

from privacy_ledger.budget.empirical import (
    EmpiricalAudit,
    accounted_epsilon_over,
    audit_from_fields,
    record_empirical_audit,
)
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.learning.privacy_audit import AuditResult

__all__ = ["record_audit", "to_empirical"]


def to_empirical(result: AuditResult, epsilon_accounted: Decimal | None = None) -> EmpiricalAudit:
    """Return the ledger's :class:`~privacy_ledger.budget.empirical.EmpiricalAudit` of ``result``.

    ``epsilon_accounted`` replaces the trainer's figure (the ledger's own
    recomputation over exactly the audited rounds, as :func:`record_audit` passes).

    Raises
    ------
    EmpiricalAuditInvalid
        A field the ledger refuses.
    """
    accounted = result.epsilon_accounted if epsilon_accounted is None else str(epsilon_accounted)
    return audit_from_fields({**result.fields(), "epsilon_accounted": accounted})


def record_audit(ledger: PrivacyLedger, result: AuditResult) -> int:
    """Record ``result`` as a signed ``budget.audited`` entry of ``ledger``; return its index.

    Raises
    ------
    EmpiricalAuditInvalid, EmpiricalAuditUnrecordable, BudgetNotSet
        As ``privacy_ledger.budget.empirical.record_empirical_audit`` (rounds the
        ledger never charged included).
    """
    accounted = accounted_epsilon_over(
        ledger, result.participant, result.asset, result.rounds_from, result.rounds_to
    )
    return record_empirical_audit(ledger, to_empirical(result, accounted))
