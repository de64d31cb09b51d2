"""The pre-launch checklist: what a machine can check before a federation goes live.

:func:`run_checklist` evaluates every item of :data:`ITEMS` against the
deployment configuration (:mod:`compliance.checklist_config`) and the ledger
database, and returns one result per item: ``pass``, ``fail`` or
``manual`` with the reason. A launch is blocked (``ok`` is false) when any
*required* item fails; ``manual`` items never block but say what a person
has to check.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine

from compliance.checklist_base import STATUSES, Facts, Item
from compliance.checklist_config import ChecklistConfig, load_config
from compliance.checklist_empirical import EMPIRICAL_ITEMS
from compliance.checklist_items import LEDGER_ITEMS
from compliance.checklist_more import MORE_ITEMS
from compliance.checklist_parties import PARTY_ITEMS

__all__ = ["ITEMS", "ChecklistEntry", "ChecklistResult", "run_checklist", "load_config"]

logger = logging.getLogger(__name__)

#: Every checklist item, in the order they are reported.
ITEMS: list[Item] = [*LEDGER_ITEMS, *PARTY_ITEMS, *MORE_ITEMS, *EMPIRICAL_ITEMS]


@dataclass(frozen=True, kw_only=True)
class ChecklistEntry:
    """The result of one item."""

    id: str
    title: str
    required: bool
    status: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ChecklistResult:
    """Every item's result; ``ok`` is false when a required item failed."""

    entries: list[ChecklistEntry]

    @property
    def ok(self) -> bool:
        """Whether no required item failed."""
        return not any(e.required and e.status == "fail" for e in self.entries)

    def to_json(self) -> dict[str, object]:
        """Return a JSON-ready form (``--json``)."""
        counts = {s: sum(1 for e in self.entries if e.status == s) for s in STATUSES}
        return {"ok": self.ok, "counts": counts, "items": [asdict(e) for e in self.entries]}


def _evaluate(item: Item, facts: Facts) -> ChecklistEntry:
    try:
        status, reason = item.check(facts)
    except Exception as exc:
        logger.warning("checklist item %s could not run: %s", item.id, exc)
        status, reason = "fail", f"check could not run: {type(exc).__name__}: {exc}"
    return ChecklistEntry(
        id=item.id,
        title=item.title,
        required=item.is_required(facts.config),
        status=status,
        reason=reason,
    )


def run_checklist(
    config: ChecklistConfig, engine: Engine | None, *, now: datetime | None = None
) -> ChecklistResult:
    """Evaluate every item of :data:`ITEMS`.

    Parameters
    ----------
    config
        The deployment description (:func:`load_config`).
    engine
        The ledger database, or ``None`` when it is not reachable (items that
        need it fail).
    now
        Time used for certificate validity (default: now, UTC).

    Returns
    -------
    ChecklistResult
        One entry per item, in :data:`ITEMS` order.
    """
    facts = Facts(config=config, engine=engine, now=now or datetime.now(tz=UTC))
    return ChecklistResult(entries=[_evaluate(item, facts) for item in ITEMS])
