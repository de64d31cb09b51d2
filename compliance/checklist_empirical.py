"""Checklist item: no empirical lower bound on epsilon exceeds the accounted epsilon.

A one-run empirical privacy audit (``budget.audited`` in the ledger's log) gives a
*lower* bound on a participant's epsilon at a stated confidence; the accountant
gives an *upper* bound for the same training. Each audit's bound is compared with
the ledger's own epsilon over the audited rounds, recomputed from its committed
charges (:func:`privacy_ledger.budget.empirical.accounted_epsilon_over`), not
with the copy the auditor wrote into the entry.

Each entry is its own 95% statement, and a participant's audits of one training
are cumulative: the same canaries and coins, rounds ``r1..r1``, ``r1..r2``, ...
(one *span*, its first round fixed). Only the newest entry of each span is judged:
it covers the whole training and is the audit to quote. Failing on any entry of a
span would take the largest of ``R`` statements and raise the false-alarm rate up
to ``R x 5%`` (measured: real DP-SGD with its charged noise, accounted epsilon 1
over five rounds, flagged round 1 and none of the four after it);
``docs/audit/dp-accounting.md``.

* ``pass``: the newest audit of every span has a bound at most the accounted
  epsilon (budgets without an audit are named as not audited; the earlier
  entries the newest supersede are counted);
* ``fail``: the newest audit of a span exceeds it (naming the participant:
  differential privacy was not applied as charged), or an audit names rounds
  the ledger has no committed charge for;
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

__all__ = ["EMPIRICAL_ITEMS", "ITEM_ID", "newest_of_each_span"]

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
    judged = newest_of_each_span(records)
    problems = [p for p in (_problem(r, ledger) for r in judged) if p is not None]
    if problems:
        return "fail", "; ".join(problems)
    audited = {(r.audit.participant, r.audit.asset) for r in records}
    unaudited = [
        f"{b.participant}/{b.asset}" for b in budgets if (b.participant, b.asset) not in audited
    ]
    tail = f"; not audited: {', '.join(unaudited)}" if unaudited else ""
    superseded = len(records) - len(judged)
    earlier = f" ({superseded} earlier entries of the same spans superseded)" if superseded else ""
    return "pass", (
        f"{len(judged)} empirical audits of {len(audited)} budgets{earlier}: the newest lower "
        f"bound of every span is at most the ledger's accounted epsilon over its rounds{tail}"
    )


def newest_of_each_span(records: list[RecordedAudit]) -> list[RecordedAudit]:
    """Return the newest entry (largest log index) of each ``(participant, asset, rounds_from)``.

    Parameters
    ----------
    records
        Audit entries as :func:`~privacy_ledger.budget.empirical.empirical_audits` reads
        them (any order).

    Returns
    -------
    list of RecordedAudit
        One entry per span, in log order.
    """
    newest: dict[tuple[str, str, str], RecordedAudit] = {}
    for r in records:
        key = (r.audit.participant, r.audit.asset, r.audit.rounds_from)
        if key not in newest or r.index > newest[key].index:
            newest[key] = r
    return sorted(newest.values(), key=lambda r: r.index)


#: The empirical-audit item.
EMPIRICAL_ITEMS: list[Item] = [
    Item(
        ITEM_ID,
        "The empirical lower bound does not exceed the accounted epsilon",
        True,
        _empirical_bound,
    ),
]
