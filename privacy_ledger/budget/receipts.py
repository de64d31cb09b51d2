"""Budget receipts: the ledger's signed statement that a round's DP charge is recorded.

A participant that trained privately for a round holds a committed reservation
in the ledger. :class:`ReceiptIssuer` turns that ledger row (never anything the
participant says) into a receipt signed with the ledger's **receipt key**, and
the aggregator accepts the participant's upload only with a receipt that
:class:`ReceiptVerifier` accepts: signed by that key, for that participant and
round, for the DP plan the upload declares, and not expired.

The receipt key is a dedicated SM2 key, not the audit log's tree-head key: the
two sign different things for different verifiers, and a compromise or
rotation of one must not affect the other. The signed body names its kind
(``secure-fed/budget-receipt/v1``), so a receipt cannot be confused with any
other signed object.

Only *committed* reservations get a receipt: a committed charge is never
refunded (:meth:`~privacy_ledger.budget.service.PrivacyLedger.abort` refuses),
so a participant cannot obtain a receipt and then release its reservation.

Bytes::

    u16 body length | body (canonical JSON, no floats) | DER SM2 signature
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey
from privacy_ledger.audit import canonical
from privacy_ledger.budget.event_rows import audit_value
from privacy_ledger.budget.queries import BudgetQueries
from privacy_ledger.budget.types import Reservation
from privacy_ledger.errors import CanonicalJSONInvalid, ReceiptInvalid, ReceiptUnavailable

__all__ = ["KIND", "BudgetReceipt", "DPPlan", "ReceiptIssuer", "ReceiptVerifier"]

logger = logging.getLogger(__name__)

KIND = "secure-fed/budget-receipt/v1"
_LEN = struct.Struct(">H")
_MAX_BODY = 4096
_MAX_SIG = 80
_KEYS = {
    "kind",
    "participant_id",
    "asset_id",
    "round_id",
    "reservation_id",
    "plan",
    "issued_at",
    "expires_at",
    "key_fingerprint",
}
_PLAN_KEYS = {"noise_multiplier", "sample_rate", "steps", "delta"}


@dataclass(frozen=True, kw_only=True)
class DPPlan:
    """The DP-SGD mechanism a round's charge was reserved for.

    Floats compare exactly: the receipt carries each as the exact decimal of
    its shortest ``repr``, which reads back to the same float.
    """

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float

    def to_fields(self) -> dict[str, object]:
        """Canonical-JSON fields (exact decimals, no floats)."""
        return {
            "noise_multiplier": audit_value(self.noise_multiplier),
            "sample_rate": audit_value(self.sample_rate),
            "steps": self.steps,
            "delta": audit_value(self.delta),
        }

    @classmethod
    def from_fields(cls, data: object) -> DPPlan:
        """Parse :meth:`to_fields` output (decimal strings); raise :class:`ReceiptInvalid`."""
        if not isinstance(data, dict) or set(data) != _PLAN_KEYS:
            raise ReceiptInvalid(f"receipt plan needs exactly the keys {sorted(_PLAN_KEYS)}")
        try:
            steps = data["steps"]
            if isinstance(steps, bool) or not isinstance(steps, int):
                raise ValueError("steps")
            return cls(
                noise_multiplier=float(Decimal(data["noise_multiplier"])),
                sample_rate=float(Decimal(data["sample_rate"])),
                steps=steps,
                delta=float(Decimal(data["delta"])),
            )
        except (ArithmeticError, ValueError, TypeError) as exc:
            raise ReceiptInvalid(f"receipt plan is malformed: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class BudgetReceipt:
    """A verified receipt: whose charge, for which round and plan, valid until when."""

    participant_id: str
    asset_id: str
    round_id: str
    reservation_id: str
    plan: DPPlan
    issued_at: float
    expires_at: float
    key_fingerprint: str


class ReceiptIssuer:
    """Signs receipts for committed reservations recorded by the ledger.

    Parameters
    ----------
    ledger
        The privacy ledger (its stored events are the only source of a receipt).
    key
        The ledger's receipt key (dedicated; never the audit log's key).
    ttl_seconds
        A receipt expires this long after it is issued.
    clock
        Epoch seconds (injectable for expiry tests).
    """

    def __init__(
        self,
        *,
        ledger: BudgetQueries,
        key: SM2PrivateKey,
        ttl_seconds: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not (isinstance(ttl_seconds, int | float) and 0 < ttl_seconds < 1e9):
            raise ReceiptInvalid(f"ttl_seconds: must be > 0, got {ttl_seconds!r}")
        self._ledger, self._key, self._ttl, self._clock = ledger, key, float(ttl_seconds), clock

    def __repr__(self) -> str:
        return f"ReceiptIssuer(key={self._key.public_key.fingerprint()[:16]})"

    @property
    def public_key(self) -> SM2PublicKey:
        """The receipt key's public half, for the aggregator's :class:`ReceiptVerifier`."""
        return self._key.public_key

    def _committed(self, participant_id: str, asset_id: str, round_id: str) -> Reservation:
        rows = [
            r
            for r in self._ledger.events(participant_id, asset_id, states=("committed",))
            if r.round_id == round_id
        ]
        if not rows:
            raise ReceiptUnavailable(
                f"participant {participant_id!r}, asset {asset_id!r}: no committed reservation "
                f"for round {round_id!r}"
            )
        return rows[-1]

    def issue(self, *, participant_id: str, asset_id: str, round_id: str) -> bytes:
        """Return receipt bytes for the participant's committed reservation of ``round_id``.

        Raises
        ------
        ReceiptUnavailable
            When the ledger has no committed reservation for that round.
        BudgetNotSet
            When the participant has no budget on ``asset_id``.
        """
        row = self._committed(participant_id, asset_id, round_id)
        event = row.event
        plan = DPPlan(
            noise_multiplier=event.noise_multiplier,
            sample_rate=event.sample_rate,
            steps=event.steps,
            delta=event.delta,
        )
        now = self._clock()
        body = canonical.encode(
            {
                "kind": KIND,
                "participant_id": participant_id,
                "asset_id": asset_id,
                "round_id": round_id,
                "reservation_id": row.id,
                "plan": plan.to_fields(),
                "issued_at": audit_value(now),
                "expires_at": audit_value(now + self._ttl),
                "key_fingerprint": self._key.public_key.fingerprint(),
            }
        )
        logger.info("receipt for reservation %s (%s, %s)", row.id, participant_id, round_id)
        return _LEN.pack(len(body)) + body + self._key.sign(body)


class ReceiptVerifier:
    """Checks receipts against the ledger's public receipt key.

    Parameters
    ----------
    public_key
        The ledger's receipt key (public half).
    clock
        Epoch seconds of the verifier (the aggregator's clock).
    """

    def __init__(self, *, public_key: SM2PublicKey, clock: Callable[[], float] = time.time) -> None:
        self._key, self._clock = public_key, clock

    def parse(self, data: bytes) -> BudgetReceipt:
        """Check the signature and the layout; return the receipt (not its binding).

        Raises
        ------
        ReceiptInvalid
            On any layout, signature or field defect.
        """
        if not isinstance(data, bytes) or len(data) < _LEN.size:
            raise ReceiptInvalid("receipt is not bytes or is truncated")
        (size,) = _LEN.unpack_from(data)
        body, sig = data[_LEN.size : _LEN.size + size], data[_LEN.size + size :]
        if size > _MAX_BODY or len(body) != size or not 0 < len(sig) <= _MAX_SIG:
            raise ReceiptInvalid("receipt body or signature length is out of range")
        try:
            self._key.verify(body, sig)
        except CryptoError:
            raise ReceiptInvalid("receipt signature does not verify under the ledger key") from None
        try:
            fields = canonical.decode(body)
        except CanonicalJSONInvalid as exc:
            raise ReceiptInvalid(f"receipt body is not canonical JSON: {exc}") from None
        return _receipt(fields)

    def verify(
        self, data: bytes, *, participant_id: str, round_id: str, plan: DPPlan
    ) -> BudgetReceipt:
        """Parse ``data`` and check it names this participant, round and plan and is fresh.

        Raises
        ------
        ReceiptInvalid
            Naming the first binding that fails.
        """
        receipt = self.parse(data)
        wanted = (("participant", participant_id), ("round", round_id), ("plan", plan))
        got = (receipt.participant_id, receipt.round_id, receipt.plan)
        for (name, want), have in zip(wanted, got, strict=True):
            if have != want:
                raise ReceiptInvalid(f"receipt is for {name} {have!r}, not {want!r}")
        now = self._clock()
        if now > receipt.expires_at:
            raise ReceiptInvalid(f"receipt expired at {receipt.expires_at} (now {now})")
        return receipt


def _receipt(fields: object) -> BudgetReceipt:
    if not isinstance(fields, dict) or set(fields) != _KEYS or fields["kind"] != KIND:
        raise ReceiptInvalid(f"receipt needs kind {KIND!r} and exactly the keys {sorted(_KEYS)}")
    strings = ("participant_id", "asset_id", "round_id", "reservation_id", "key_fingerprint")
    if not all(isinstance(fields[k], str) and fields[k] for k in strings):
        raise ReceiptInvalid(f"receipt fields {strings} must be non-empty strings")
    try:
        issued, expires = float(Decimal(fields["issued_at"])), float(Decimal(fields["expires_at"]))
    except (ArithmeticError, ValueError, TypeError):
        raise ReceiptInvalid("receipt times must be decimal strings") from None
    return BudgetReceipt(
        participant_id=fields["participant_id"],
        asset_id=fields["asset_id"],
        round_id=fields["round_id"],
        reservation_id=fields["reservation_id"],
        plan=DPPlan.from_fields(fields["plan"]),
        issued_at=issued,
        expires_at=expires,
        key_fingerprint=fields["key_fingerprint"],
    )
