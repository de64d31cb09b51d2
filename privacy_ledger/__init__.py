"""Privacy ledger: epsilon budgets that cannot be overspent, and the audit log.

Budgets, reservations and accounting live in :mod:`privacy_ledger.budget.service`;
the schema in :mod:`privacy_ledger.models` (plus ``audit_models``) and its
Alembic migrations. The tamper-evident audit log is :class:`AuditLog`
(:mod:`privacy_ledger.audit.log`), checked end to end by :func:`verify_log`.
"""

from privacy_ledger.audit.checkpoint import SignedTreeHead
from privacy_ledger.audit.events import AuditEvent
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.verify.log import VerificationReport, verify_log
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.service import PrivacyLedger
from privacy_ledger.budget.types import AuditAppender, BudgetStatus, Reservation, RoundEpsilon
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.errors import BudgetExceeded, LedgerError
from privacy_ledger.rounds import RoundStore

__all__ = [
    "AuditAppender",
    "AuditEvent",
    "AuditLog",
    "BudgetExceeded",
    "BudgetStatus",
    "LedgerError",
    "MechanismEvent",
    "PrivacyLedger",
    "Reservation",
    "RoundEpsilon",
    "RoundStore",
    "SignedTreeHead",
    "VerificationReport",
    "create_ledger_engine",
    "upgrade",
    "verify_log",
]
