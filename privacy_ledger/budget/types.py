"""Value types of the budget service, the gate interfaces it offers, and the audit sink.

:class:`ChargeGate` (reserve, commit, abort) and :class:`BudgetGate` (plus
epsilon spent and noise calibration) are the small interfaces callers of a
budget depend on (the layering rule, docs/architecture.md):
``privacy_ledger.PrivacyLedger`` implements both with a database and audit log,
``secure_fed.learning.budget_gate.InMemoryBudgetGate`` in process. They live here
so that every layer above the ledger names the same interface without importing
another layer.

:class:`AuditAppender` is the small interface the ledger needs
from the audit log: ``privacy_ledger.audit.log.AuditLog`` implements it, and any
object with the same ``append`` works. ``append`` must add rows to the
caller's session *without committing*, so that a budget change and its audit
entry commit in one transaction. A sink that signs tree heads in batches may
also offer ``checkpoint(session)``; the ledger calls it after each append (in
the same transaction) so heads are signed when due.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple, Protocol

from sqlalchemy.orm import Session

from privacy_ledger.budget.mechanism import MechanismEvent

__all__ = [
    "AuditAppender",
    "BudgetGate",
    "BudgetStatus",
    "ChargeGate",
    "Reservation",
    "RoundEpsilon",
]


class AuditAppender(Protocol):
    """Where the ledger writes its audit events (``budget.set``, ``budget.reserved``...)."""

    def append(
        self,
        session: Session,
        *,
        event: str,
        subject: str,
        fields: Mapping[str, object],
        sensitive: Mapping[str, object] | None = None,
    ) -> int:
        """Add one audit entry to ``session`` without committing; return its index."""
        ...


@dataclass(frozen=True, kw_only=True)
class Reservation:
    """A privacy event as stored by the ledger (reserved, committed, aborted or expired).

    Attributes
    ----------
    id
        Reservation id (random, 32 hex characters).
    participant_id, asset_id
        Whose budget it draws on.
    round_id
        Federation round it belongs to, if any.
    event
        The mechanism inputs (noise multiplier, sample rate, steps, ...).
    state
        ``reserved``, ``committed``, ``aborted`` or ``expired``.
    epsilon_projected
        Epsilon of the whole history (committed + active reservations + this
        one) when it was reserved, rounded up.
    created_at, expires_at, resolved_at
        Epoch seconds; ``resolved_at`` is ``None`` while reserved.
    """

    id: str
    participant_id: str
    asset_id: str
    round_id: str | None
    event: MechanismEvent
    state: str
    epsilon_projected: Decimal
    created_at: float
    expires_at: float
    resolved_at: float | None = None


class RoundEpsilon(NamedTuple):
    """Cumulative epsilon of the committed history after one round (or unlabelled event).

    A named tuple, so ``for round_id, epsilon_after in status.per_round`` works.
    """

    round_id: str | None
    epsilon_after: Decimal


@dataclass(frozen=True, kw_only=True)
class BudgetStatus:
    """Budget of one participant's data asset, as shown to the API and reports.

    Attributes
    ----------
    limit
        Epsilon limit (exact decimal).
    spent
        Epsilon of the committed history (rounded up).
    reserved
        Extra epsilon held by active reservations: epsilon(committed + reserved)
        minus ``spent``; epsilons compose sub-additively, so this is not a sum.
    remaining
        ``limit - (spent + reserved)``, never below zero.
    per_round
        Epsilon after each committed round, in commit order.
    """

    participant_id: str
    asset_id: str
    accountant: str
    delta: float
    limit: Decimal
    spent: Decimal
    reserved: Decimal
    remaining: Decimal
    active_reservations: int
    per_round: list[RoundEpsilon] = field(default_factory=list)


class ChargeGate(Protocol):
    """Reserve, commit or abort one participant's privacy charge.

    ``reserve`` returns a :class:`Reservation`; pass its ``id`` to ``commit``
    or ``abort``. A refusal raises and spends nothing.
    """

    def reserve(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        *,
        round_id: str | None = None,
    ) -> Reservation:
        """Hold budget for ``event``, or raise the gate's refusal error (nothing spent)."""
        ...

    def commit(self, reservation_id: str) -> None:
        """Charge a held reservation: the mechanism ran. Idempotent."""
        ...

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Release a held reservation; charge it anyway if ``released_anything``."""
        ...


class BudgetGate(ChargeGate, Protocol):
    """A :class:`ChargeGate` that also reports spent epsilon and calibrates noise."""

    def epsilon_spent(self, participant_id: str, asset_id: str) -> Decimal:
        """Epsilon of the committed history, recomputed from its mechanism events."""
        ...

    def calibrate_noise(
        self,
        participant_id: str,
        asset_id: str,
        *,
        rounds: int,
        steps_per_round: int,
        sample_rate: float,
        max_grad_norm: float,
        epsilon: str | Decimal | None = None,
    ) -> float:
        """Smallest noise multiplier keeping history + planned rounds within budget.

        ``epsilon`` is the extra epsilon the plan may add on top of the current
        history (committed and held), capped by the remaining budget; ``None``
        allows the whole remaining budget.
        """
        ...
