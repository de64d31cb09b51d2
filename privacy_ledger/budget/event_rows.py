"""Conversions between stored privacy-event rows, mechanism events and audit fields.

Audit entries are canonical JSON without floats (see :mod:`privacy_ledger.audit.canonical`):
floats travel as the exact decimal of their shortest ``repr``, epsilons as the
rounded-up ``Decimal`` the ledger compared, infinities as strings.
"""

from __future__ import annotations

import re
import secrets
from decimal import Decimal
from typing import Any

from crypto.sm import sm3_digest
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.types import Reservation
from privacy_ledger.errors import LedgerParameterInvalid
from privacy_ledger.models import Budget, PrivacyEventRow

__all__ = [
    "audit_value",
    "event_of",
    "reservation_of",
    "event_fields",
    "new_row",
    "request_reservation_id",
]

_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")
_REQUEST_DOMAIN = b"secure-fed/reservation-request/v1\x00"


def request_reservation_id(participant_id: str, asset_id: str, request_id: str) -> str:
    """Return the reservation id a caller-chosen ``request_id`` stands for (32 hex).

    SM3 over a domain tag and the three ids (length-prefixed), so two budgets
    never share a reservation id whatever request ids their callers choose.

    Raises
    ------
    LedgerParameterInvalid
        ``request_id`` is not 16-128 characters of ``[A-Za-z0-9_-]``.
    """
    if not isinstance(request_id, str) or _REQUEST_ID.fullmatch(request_id) is None:
        raise LedgerParameterInvalid(
            "request_id: must be 16-128 characters of [A-Za-z0-9_-] (random per request)"
        )
    parts = [p.encode("utf-8") for p in (participant_id, asset_id, request_id)]
    framed = b"".join(len(p).to_bytes(2, "big") + p for p in parts)
    return sm3_digest(_REQUEST_DOMAIN + framed).hex()[:32]


def audit_value(value: float | Decimal) -> Decimal | str:
    """Return a float or epsilon as an exact decimal for canonical JSON (no floats)."""
    dec = value if isinstance(value, Decimal) else Decimal(repr(float(value)))
    return dec if dec.is_finite() else str(dec)


def event_of(row: PrivacyEventRow) -> MechanismEvent:
    """Rebuild the mechanism event stored in ``row``."""
    return MechanismEvent(
        noise_multiplier=row.noise_multiplier,
        sample_rate=row.sample_rate,
        steps=row.steps,
        delta=row.delta,
        max_grad_norm=row.max_grad_norm,
        mechanism=row.mechanism,
        sampler=row.sampler,
        versions={str(k): str(v) for k, v in (row.versions or {}).items()},
    )


def reservation_of(row: PrivacyEventRow) -> Reservation:
    """Return the public view of a stored privacy event."""
    return Reservation(
        id=row.id,
        participant_id=row.participant_id,
        asset_id=row.asset_id,
        round_id=row.round_id,
        event=event_of(row),
        state=row.state,
        epsilon_projected=Decimal(row.epsilon_projected),
        created_at=row.created_at,
        expires_at=row.expires_at,
        resolved_at=row.resolved_at,
    )


def event_fields(event: MechanismEvent) -> dict[str, Any]:
    """Return the accountant inputs of ``event`` as canonical-JSON audit fields."""
    return {
        "noise_multiplier": audit_value(event.noise_multiplier),
        "sample_rate": audit_value(event.sample_rate),
        "steps": event.steps,
        "max_grad_norm": audit_value(event.max_grad_norm),
        "delta": audit_value(event.delta),
        "mechanism": event.mechanism,
        "sampler": event.sampler,
        "versions": dict(event.versions),
    }


def new_row(
    budget: Budget,
    event: MechanismEvent,
    round_id: str | None,
    projected: Decimal,
    now: float,
    ttl: float,
    reservation_id: str | None = None,
) -> PrivacyEventRow:
    """Build the ``reserved`` row of a new reservation (random 128-bit id unless given)."""
    return PrivacyEventRow(
        id=secrets.token_hex(16) if reservation_id is None else reservation_id,
        participant_id=budget.participant_id,
        asset_id=budget.asset_id,
        round_id=round_id,
        state="reserved",
        accountant=budget.accountant,
        noise_multiplier=float(event.noise_multiplier),
        sample_rate=float(event.sample_rate),
        steps=int(event.steps),
        max_grad_norm=float(event.max_grad_norm),
        delta=float(event.delta),
        sampler=event.sampler,
        mechanism=event.mechanism,
        versions=dict(event.versions),
        epsilon_projected=str(projected),
        released_anything=None,
        created_at=now,
        expires_at=now + float(ttl),
        resolved_at=None,
    )
