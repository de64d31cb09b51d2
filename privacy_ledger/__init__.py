"""Privacy ledger: epsilon budgets that cannot be overspent, and the audit log.

Budgets, reservations and accounting live in :mod:`privacy_ledger.budgets`;
the schema in :mod:`privacy_ledger.models` and its Alembic migrations.
"""

from privacy_ledger.budget_types import AuditSink, BudgetStatus, Reservation, RoundEpsilon
from privacy_ledger.budgets import PrivacyLedger
from privacy_ledger.db import create_ledger_engine, upgrade
from privacy_ledger.errors import BudgetExceeded, LedgerError
from privacy_ledger.mechanism import MechanismEvent
from privacy_ledger.rounds import RoundStore

__all__ = [
    "AuditSink",
    "BudgetExceeded",
    "BudgetStatus",
    "LedgerError",
    "MechanismEvent",
    "PrivacyLedger",
    "Reservation",
    "RoundEpsilon",
    "RoundStore",
    "create_ledger_engine",
    "upgrade",
]
