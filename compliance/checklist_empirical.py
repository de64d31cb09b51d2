"""Checklist item: no empirical lower bound on epsilon exceeds the accounted epsilon.

A one-run empirical privacy audit (``budget.audited`` in the ledger's log) gives a
*lower* bound on a participant's epsilon at a stated confidence; the accountant
gives an *upper* bound for the same training. Each audit's bound is compared with
the ledger's own epsilon over the audited rounds, recomputed from its committed
charges (:func:`privacy_ledger.budget.empirical.accounted_epsilon_over`), not
with the copy the auditor wrote into the entry.

* ``pass``: every recorded audit's bound is at most the accounted epsilon
  (budgets without an audit are named as not audited);
* ``fail``: an audit's bound exceeds it (naming the participant: differential
  privacy was not applied as charged), or an audit names rounds the ledger has
  no committed charge for;
* ``manual``: no audit was recorded at all. Auditing is optional (a federation
  may opt out); a person confirms the federation chose not to audit, or runs it.
"""

from __future__ import annotations

from compliance.checklist_base import Facts, Item, Outcome
from compliance.checklist_items import no_ledger
from privacy_ledger.budget.empirical import (
    RecordedAudit,
    accounted_epsilon_over,
    audited_budgets,
    empirical_audits,
)
from privacy_ledger.budget.service import PrivacyLedger
from privacy_ledger.errors import LedgerError

__all__ = ["EMPIRICAL_ITEMS", "ITEM_ID"]

#: Id of the item (``secure-fed audit checklist`` prints it).
ITEM_ID = "dp.empirical_bound_within_accounted"


def _problem(recorded: RecordedAudit, ledger: PrivacyLedger) -> str | None:
    a = recorded.audit
    who = f"participant {a.participant} (asset {a.asset})"
    try:
        accounted = accounted_epsilon_over(
            ledger, a.participant, a.asset, a.rounds_from, a.rounds_to
        )
    except LedgerError as exc:
        return (
            f"{who}: audit entry {recorded.index} (rounds {a.rounds_from} to {a.rounds_to}) "
            f"cannot be compared with an accounted epsilon: {exc.message}"
        )
    if a.epsilon_lower_bound <= accounted:
        return None
    return (
        f"{who}: {a.label} {a.epsilon_lower_bound} (audit entry {recorded.index}, rounds "
        f"{a.rounds_from} to {a.rounds_to}) exceeds the accounted epsilon {accounted} over "
        "those rounds: differential privacy was not applied as charged"
    )


def _empirical_bound(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    ledger = PrivacyLedger(f.engine)
    try:
        records = empirical_audits(ledger)
        budgets = audited_budgets(ledger)
    except LedgerError as exc:
        return "fail", f"the audit entries cannot be read: {exc}"
    if not records:
        return "manual", (
            "not audited: the ledger records no empirical privacy audit (budget.audited); "
            "confirm the federation chose not to audit, or run one "
            "(docs/audit/dp-accounting.md) and check again"
        )
    problems = [p for p in (_problem(r, ledger) for r in records) if p is not None]
    if problems:
        return "fail", "; ".join(problems)
    audited = {(r.audit.participant, r.audit.asset) for r in records}
    unaudited = [
        f"{b.participant}/{b.asset}" for b in budgets if (b.participant, b.asset) not in audited
    ]
    tail = f"; not audited: {', '.join(unaudited)}" if unaudited else ""
    return "pass", (
        f"{len(records)} empirical audits of {len(audited)} budgets: every lower bound is at "
        f"most the ledger's accounted epsilon over its rounds{tail}"
    )


#: The empirical-audit item.
EMPIRICAL_ITEMS: list[Item] = [
    Item(
        ITEM_ID,
        "The empirical lower bound does not exceed the accounted epsilon",
        True,
        _empirical_bound,
    ),
]
