"""Types of the pre-launch checklist: the facts a check sees and one item.

Each check receives a :class:`Facts` (configuration, ledger engine, time)
and returns ``(status, reason)`` with status ``pass``, ``fail`` or
``manual``; ``manual`` always says what a person has to check. What the
machine checks comes from the ledger database and the files named in the
configuration; nothing is assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from compliance.checklist_config import ChecklistConfig

__all__ = ["Facts", "Item", "Outcome", "STATUSES"]

#: The three results of an item.
STATUSES = ("pass", "fail", "manual")

Outcome = tuple[str, str]


@dataclass(frozen=True)
class Facts:
    """What the checks look at: the configuration and the ledger (if reachable)."""

    config: ChecklistConfig
    engine: Engine | None
    now: datetime


@dataclass(frozen=True)
class Item:
    """One checklist item: id, title, whether a failure blocks launch, and its check."""

    id: str
    title: str
    required: bool | Callable[[ChecklistConfig], bool]
    check: Callable[[Facts], Outcome]

    def is_required(self, config: ChecklistConfig) -> bool:
        """Whether a failure of this item blocks launch under ``config``."""
        return self.required(config) if callable(self.required) else self.required
