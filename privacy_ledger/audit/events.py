"""Registry of audit event types: one registry, and errors list its names.

Every audit entry names one registered event type. The built-in types below
cover the privacy ledger and the round protocol; later packages add theirs
with :func:`register_event` at import time, and ``docs/audit/events.md`` has a
``### name`` heading per type (a test fails when one is missing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from privacy_ledger.errors import AuditParameterInvalid, UnknownEventType

__all__ = ["AuditEvent", "EventRegistry", "DEFAULT_REGISTRY", "register_event", "get_event"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One audit event type.

    Parameters
    ----------
    name
        Dotted lower-case name, ``<area>.<what happened>`` (e.g. ``budget.committed``).
    description
        One sentence saying when the event is written.
    """

    name: str
    description: str

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or len(self.name) > 64:
            raise AuditParameterInvalid(
                f"name: {self.name!r} must be dotted lower-case like 'budget.set' (<= 64 chars)"
            )
        if not self.description.strip():
            raise AuditParameterInvalid(f"description: empty for event {self.name!r}")


class EventRegistry:
    """Name -> :class:`AuditEvent` map; unknown names raise :class:`UnknownEventType`."""

    def __init__(self) -> None:
        self._events: dict[str, AuditEvent] = {}

    def register(self, event: AuditEvent) -> AuditEvent:
        """Add ``event``; registering the same definition twice is a no-op.

        Raises
        ------
        AuditParameterInvalid
            When another event with the same name but a different description exists.
        """
        known = self._events.get(event.name)
        if known is not None and known != event:
            raise AuditParameterInvalid(f"event: {event.name!r} already registered differently")
        self._events[event.name] = event
        return event

    def get(self, name: str | AuditEvent) -> AuditEvent:
        """Return the registered event called ``name``.

        Raises
        ------
        UnknownEventType
            When ``name`` is not registered; the message lists the allowed names.
        """
        key = name.name if isinstance(name, AuditEvent) else name
        try:
            return self._events[key]
        except (KeyError, TypeError):
            allowed = ", ".join(sorted(self._events))
            raise UnknownEventType(
                f"event: {key!r} is not registered; allowed: {allowed}"
            ) from None

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._events)

    def __contains__(self, name: object) -> bool:
        return name in self._events


DEFAULT_REGISTRY = EventRegistry()


def register_event(name: str, description: str) -> AuditEvent:
    """Register an event type in :data:`DEFAULT_REGISTRY` and return it."""
    return DEFAULT_REGISTRY.register(AuditEvent(name=name, description=description))


def get_event(name: str | AuditEvent) -> AuditEvent:
    """Look ``name`` up in :data:`DEFAULT_REGISTRY` (raises :class:`UnknownEventType`)."""
    return DEFAULT_REGISTRY.get(name)


_BUILTIN = {
    "budget.set": "A participant's epsilon/delta budget for a data asset was created or changed.",
    "budget.reserved": "Epsilon was reserved for a planned mechanism event (check passed).",
    "budget.committed": "A reservation was committed: the mechanism ran and its epsilon is spent.",
    "budget.aborted": "A reservation was released before anything derived from it was released.",
    "budget.expired": "A reservation passed its deadline and was resolved by the ledger.",
    "budget.refused": "A request was refused because the projected epsilon exceeds the budget.",
    "budget.audited": (
        "A one-run empirical privacy audit put a lower bound on a participant's epsilon."
    ),
    "participant.registered": "A participant (hospital, bank) and its SM2 key were registered.",
    "participant.status_changed": "A participant was suspended, reactivated or retired.",
    "round.opened": "A training/distillation round was opened with its plan and participants.",
    "round.transition": "A round moved from one protocol stage to the next.",
    "round.completed": "A round finished and its aggregate was released.",
    "round.aborted": "A round was aborted; the reason says which stage failed.",
    "upload.received": "A participant's upload (digest, size, kind, shape) was accepted.",
    "upload.rejected": "An upload was refused (bad signature, size, shape, stage or duplicate).",
    "outlier.decision": "The robust aggregation kept or excluded a contribution, with its score.",
    "decryption.requested": "Decryption of an aggregate was requested by a key holder.",
    "decryption.released": "A decrypted aggregate was released to the named recipients.",
    "key.generated": "A key pair (SM2, CKKS context or SM4 evidence key) was generated.",
    "key.rotated": "A key was replaced by a new one; both fingerprints are recorded.",
    "access.denied": "A caller was refused access to a resource or operation.",
}

for _name, _description in _BUILTIN.items():
    register_event(_name, _description)
