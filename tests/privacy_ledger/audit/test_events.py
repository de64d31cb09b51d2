from __future__ import annotations

import re
from pathlib import Path

import pytest

from privacy_ledger.audit.events import DEFAULT_REGISTRY, AuditEvent, EventRegistry, get_event
from privacy_ledger.errors import AuditParameterInvalid, UnknownEventType

DOC = Path(__file__).resolve().parents[3] / "docs" / "audit" / "events.md"
REQUIRED = [
    "budget.set",
    "budget.reserved",
    "budget.committed",
    "budget.aborted",
    "budget.expired",
    "budget.refused",
    "round.opened",
    "round.transition",
    "round.aborted",
    "upload.received",
    "upload.rejected",
    "outlier.decision",
    "decryption.requested",
    "decryption.released",
    "key.generated",
    "key.rotated",
    "access.denied",
]


def test_required_events_are_registered() -> None:
    for name in REQUIRED:
        assert name in DEFAULT_REGISTRY
        assert get_event(name).name == name and get_event(name).description.strip()


def test_every_registered_event_has_a_docs_heading() -> None:
    headings = set(re.findall(r"^###\s+`?([a-z0-9_.]+)`?\s*$", DOC.read_text("utf-8"), re.M))
    missing = [name for name in DEFAULT_REGISTRY.names() if name not in headings]
    assert not missing, f"docs/audit/events.md lacks '### name' for {missing}"


def test_unknown_event_lists_allowed_names() -> None:
    fragment = r"'budget\.spent' is not registered; allowed: .*budget\.set"
    with pytest.raises(UnknownEventType, match=fragment):
        get_event("budget.spent")


def test_registry_rules() -> None:
    registry = EventRegistry()
    event = registry.register(AuditEvent(name="x.y", description="d"))
    again = registry.register(AuditEvent(name="x.y", description="d"))
    assert again == event and registry.names() == ["x.y"]
    assert registry.get(event) == event and "x.y" in registry
    with pytest.raises(AuditParameterInvalid, match="already registered differently"):
        registry.register(AuditEvent(name="x.y", description="other"))
    with pytest.raises(AuditParameterInvalid, match="name: 'Bad Name'"):
        AuditEvent(name="Bad Name", description="d")
    with pytest.raises(AuditParameterInvalid, match="description: empty"):
        AuditEvent(name="a.b", description=" ")
