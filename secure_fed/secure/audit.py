"""Where the protocol's audit events go: one :class:`AuditSink` protocol, two sinks.

The key authority, the helper (through :mod:`secure_fed.secure.release_policy`),
the outlier policy and the envelope gate write their events
(``decryption.*``, ``outlier.decision``, ``upload.rejected``, ``access.denied``,
``key.generated``, ``plan.installed``; this module registers the last) through
:class:`AuditSink`, so they can be tested without a
database (the layering rule, docs/architecture.md). Two implementations:

* :class:`MemoryAuditSink` keeps events in a list (tests, in-process runs);
* :class:`LedgerAuditSink` appends each event to
  :class:`privacy_ledger.audit.log.AuditLog` (canonical JSON, SM3 Merkle tree in
  the style of RFC 6962, SM2-signed heads), one committed transaction per event.

Both refuse event names missing from the ledger's registry
(``privacy_ledger.audit.events``). Canonical JSON has no floats, so
:func:`canonical_fields` turns a finite float into the exact decimal of its
shortest ``repr`` (:func:`secure_fed.wire.decimal_text`, the rule of the wire
headers: ``1e-07`` -> ``"0.0000001"``) and a non-finite one into its name
(``"nan"``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from crypto.sm import sm3_digest
from privacy_ledger.audit.events import get_event, register_event
from privacy_ledger.audit.log import AuditLog
from secure_fed.wire import decimal_text

__all__ = [
    "PLAN_INSTALLED",
    "AuditSink",
    "LedgerAuditSink",
    "MemoryAuditSink",
    "canonical_fields",
    "record_plan_installed",
]

PLAN_INSTALLED = register_event(
    "plan.installed",
    "A gatekeeper fixed a round's release plan from an authenticated request (as applied).",
).name


class AuditSink(Protocol):
    """Where protocol audit events go (the ledger's log behind an adapter, or memory)."""

    def record(self, event: str, details: Mapping[str, object]) -> None:
        """Record one event of a registered type (``privacy_ledger.audit.events``)."""
        ...


@dataclass
class MemoryAuditSink:
    """Audit sink that keeps events in a list (tests and in-process runs; no persistence)."""

    events: list[tuple[str, dict[str, object]]] = field(default_factory=list)

    def record(self, event: str, details: Mapping[str, object]) -> None:
        """Append ``(event, details)`` after checking the name is registered.

        Raises
        ------
        privacy_ledger.errors.UnknownEventType
            If ``event`` is not registered; the message lists the registered names.
        """
        get_event(event)
        self.events.append((event, dict(details)))

    def named(self, event: str) -> list[dict[str, object]]:
        """Details of every recorded event called ``event``, oldest first."""
        return [d for e, d in self.events if e == event]


def canonical_fields(details: Mapping[str, object]) -> dict[str, object]:
    """Make ``details`` canonical-JSON safe: floats to decimal strings, tuples to lists."""
    return {str(k): _value(v) for k, v in details.items()}


def _value(value: object) -> object:
    if isinstance(value, bool) or value is None or isinstance(value, int | str | Decimal):
        return value
    if isinstance(value, float):
        return decimal_text(value) if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return [_value(v) for v in value]
    if isinstance(value, Mapping):
        return canonical_fields(value)
    return str(value)


def _subject(details: Mapping[str, object]) -> str:
    pid = details.get("participant_id")
    if isinstance(pid, str) and pid:
        return f"participant:{pid}"
    rid = details.get("round_id")
    if isinstance(rid, int):
        return f"round:{rid}"
    return "secure_fed:aggregation"


class LedgerAuditSink:
    """Append every event to an :class:`AuditLog`, each in its own committed transaction.

    Parameters
    ----------
    engine
        The ledger database engine (migrated).
    log
        The audit log (holds the SM2 signing key of tree heads).
    """

    def __init__(self, *, engine: Engine, log: AuditLog) -> None:
        self.engine, self.log = engine, log

    def record(self, event: str, details: Mapping[str, object]) -> None:
        """Append one event; raises the log's errors (e.g. ``UnknownEventType``)."""
        with Session(self.engine) as session:
            self.log.append(
                session, event=event, subject=_subject(details), fields=canonical_fields(details)
            )
            self.log.checkpoint(session)
            session.commit()

    def sign_pending(self) -> None:
        """Sign a tree head over every entry not yet under one (a party stopping cleanly).

        Heads are signed in batches as entries arrive, so a service's last few
        events would otherwise stay under the hash chain alone until the next event.
        """
        with Session(self.engine) as session:
            self.log.checkpoint(session, force=True)
            session.commit()


def record_plan_installed(
    audit: AuditSink | None,
    *,
    party: str,
    plan_bytes: bytes,
    participants: Iterable[str] | None,
    request: Mapping[str, object] | None = None,
) -> None:
    """Record ``plan.installed``: the plan a gatekeeper applied, not the one it was sent.

    Parameters
    ----------
    audit
        The sink (nothing is recorded without one).
    party
        ``"key_authority"`` or ``"helper"``.
    plan_bytes
        Canonical bytes of the plan as installed (after the gatekeeper raised its
        minimum); the event carries their SM3 and every field.
    participants
        The participant set the plan's openings may name (the enrolled roster).
    request
        The authenticated request's signer, nonce and digest, when known.
    """
    if audit is None:
        return
    plan = json.loads(plan_bytes)
    details: dict[str, object] = {
        "party": party,
        "round_id": plan.get("round_id"),
        "plan_sm3": sm3_digest(plan_bytes).hex(),
        "participants": sorted(participants) if participants is not None else None,
        "min_participants": plan.get("min_participants"),
        "weight_floor": plan.get("weight_floor"),
        "max_weight": plan.get("max_weight"),
        "plan": plan,
        **({"request": dict(request)} if request else {}),
    }
    audit.record(PLAN_INSTALLED, details)
