"""Stored budget limits checked against the ``budget.set`` entries of the audit log.

:func:`verify_log` proves the log unaltered, but a budget row changed without
writing to the log (an unaudited ``set_budget``, or a direct ``UPDATE``) leaves
the log intact and the limit that the ledger enforces unrecorded.
:func:`check_budget_limits` replays the newest ``budget.set`` entry of every
budget and compares it with the ``budgets`` table: limit, delta and accountant.
Run it after :func:`~privacy_ledger.audit.verify.log.verify_log`, which vouches
for the entries it reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.errors import BudgetUnaudited
from privacy_ledger.models import Budget

__all__ = ["BudgetDisagreement", "budget_disagreements", "check_budget_limits"]

_NOT_RECORDED = "not recorded"


@dataclass(frozen=True, kw_only=True)
class BudgetDisagreement:
    """One budget whose stored value differs from what the audit log records for it."""

    participant: str
    asset: str
    item: str
    stored: str
    logged: str

    def __str__(self) -> str:
        return (
            f"{self.participant}/{self.asset} {self.item}: table {self.stored}, "
            f"audit log {self.logged}"
        )


def _same(item: str, stored: str, logged: str) -> bool:
    if item == "accountant":
        return stored == logged
    try:
        return Decimal(stored) == Decimal(logged)
    except (InvalidOperation, ValueError):
        return False


def _logged(session: Session) -> dict[str, dict[str, str]]:
    """Return the newest ``budget.set`` fields per subject."""
    latest: dict[str, dict[str, str]] = {}
    query = (
        select(AuditEntryRow.subject, AuditEntryRow.entry)
        .where(AuditEntryRow.event == "budget.set")
        .order_by(AuditEntryRow.entry_index)
    )
    for subject, entry in session.execute(query):
        fields = json.loads(entry).get("fields", {})
        latest[subject] = {k: str(fields.get(k)) for k in ("epsilon_limit", "delta", "accountant")}
    return latest


def budget_disagreements(engine: Engine) -> list[BudgetDisagreement]:
    """Return every budget item whose stored value the audit log does not record.

    Parameters
    ----------
    engine
        The ledger database (read only).

    Returns
    -------
    list[BudgetDisagreement]
        Empty when each budget's limit, delta and accountant equal its newest
        ``budget.set`` entry; a budget with no entry at all disagrees on every item.
    """
    found = []
    with Session(engine) as session:
        logged = _logged(session)
        for budget in session.scalars(
            select(Budget).order_by(Budget.participant_id, Budget.asset_id)
        ):
            entry = logged.get(f"participant:{budget.participant_id}/asset:{budget.asset_id}", {})
            stored = {
                "epsilon_limit": budget.epsilon_limit,
                "delta": repr(float(budget.delta)),
                "accountant": budget.accountant,
            }
            for item, value in stored.items():
                recorded = entry.get(item, _NOT_RECORDED)
                if not _same(item, value, recorded):
                    found.append(
                        BudgetDisagreement(
                            participant=budget.participant_id,
                            asset=budget.asset_id,
                            item=item,
                            stored=value,
                            logged=recorded,
                        )
                    )
    return found


def check_budget_limits(engine: Engine) -> int:
    """Raise unless every stored budget equals its newest ``budget.set`` entry.

    Returns
    -------
    int
        The number of budgets checked.

    Raises
    ------
    BudgetUnaudited
        ``LEDGER_BUDGET_UNAUDITED``, naming each disagreeing budget item.
    """
    found = budget_disagreements(engine)
    if found:
        shown = "; ".join(str(d) for d in found[:5])
        more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
        raise BudgetUnaudited(
            f"{len(found)} budget item(s) differ from what the audit log records: {shown}{more}",
            disagreements=found,
        )
    with Session(engine) as session:
        return len(session.scalars(select(Budget.participant_id)).all())
