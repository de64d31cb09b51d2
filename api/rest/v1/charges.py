"""``/v1/budgets/{participant_id}/{asset_id}/...``: reserve, commit, abort; spent; calibrate.

The participant's side of the budget over HTTP, so that a trainer on another
machine charges the ledger through the API
(:class:`secure_fed.deploy.remote_budget.RemoteBudgetGate`) exactly as it
charges :class:`privacy_ledger.PrivacyLedger` in process. A ``participant``
token charges only its own budget (another participant's id is a 403,
audited); ``admin`` may resolve any reservation (``budgets:charge``);
``officer`` and ``service`` read the spent epsilon and calibrate, and change
nothing.

Every request that a lost answer could make a client repeat is safe to
repeat: ``reserve`` carries a caller-chosen ``request_id`` (the ledger derives
the reservation id from it, so a repeat answers the reservation already
made), ``commit`` is idempotent, and aborting an aborted reservation is a no-op.
The ledger writes every change to the audit log in the same transaction.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from api.rest.auth import ChargeBudgets, ReadBudgets, context
from api.rest.problems import problem_responses
from api.rest.v1.charge_schemas import (
    AbortIn,
    CalibrateIn,
    CalibrateOut,
    EpsilonSpentOut,
    ReserveIn,
)
from api.rest.v1.schemas import ID_PATTERN, ReservationOut
from privacy_ledger.budget.event_rows import reservation_of
from privacy_ledger.errors import ReservationUnknown
from privacy_ledger.models import PrivacyEventRow

__all__ = ["router"]

router = APIRouter(prefix="/budgets", tags=["budgets"], responses=problem_responses(401, 403))

ParticipantId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
AssetId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]
ReservationId = Annotated[str, Path(pattern=r"^[0-9a-f]{16,64}$")]
_BASE = "/{participant_id}/{asset_id}"
_RESERVATION = _BASE + "/reservations/{reservation_id}"


def _owned(request: Request, participant_id: str, asset_id: str, reservation_id: str) -> None:
    """Refuse a reservation id that is not of this budget (404: no oracle for other ids)."""
    with context(request).sessions() as session:
        row = session.get(PrivacyEventRow, reservation_id)
        if row is None or (row.participant_id, row.asset_id) != (participant_id, asset_id):
            raise ReservationUnknown(
                f"reservation_id: {reservation_id!r} is not a reservation of "
                f"{participant_id!r}/{asset_id!r}"
            )


def _current(request: Request, reservation_id: str) -> ReservationOut:
    with context(request).sessions() as session:
        row = session.get(PrivacyEventRow, reservation_id)
        if row is None:  # pragma: no cover - the row was just written
            raise ReservationUnknown(f"reservation_id: {reservation_id!r} does not exist")
        return ReservationOut.of(reservation_of(row))


@router.post(
    _BASE + "/reservations",
    response_model=ReservationOut,
    status_code=201,
    responses=problem_responses(404, 409, 422),
)
def reserve(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    body: ReserveIn,
    principal: ChargeBudgets,
) -> ReservationOut:
    """Hold budget for a planned mechanism, or refuse (409 ``LEDGER_BUDGET_EXCEEDED``).

    Repeating the request with the same ``request_id``, round and mechanism
    answers the same reservation in its current state and holds nothing more.
    """
    principal.require_participant(participant_id)
    held = context(request).ledger.reserve(
        participant_id,
        asset_id,
        body.event.event(),
        round_id=body.round_id,
        ttl_seconds=body.ttl_seconds,
        request_id=body.request_id,
    )
    return ReservationOut.of(held)


@router.post(
    _RESERVATION + "/commit",
    response_model=ReservationOut,
    responses=problem_responses(404, 409, 422),
)
def commit(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    reservation_id: ReservationId,
    principal: ChargeBudgets,
) -> ReservationOut:
    """Charge a held reservation (the mechanism ran); committing twice charges once."""
    principal.require_participant(participant_id)
    _owned(request, participant_id, asset_id, reservation_id)
    context(request).ledger.commit(reservation_id)
    return _current(request, reservation_id)


@router.post(
    _RESERVATION + "/abort",
    response_model=ReservationOut,
    responses=problem_responses(404, 409, 422),
)
def abort(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    reservation_id: ReservationId,
    body: AbortIn,
    principal: ChargeBudgets,
) -> ReservationOut:
    """Release a held reservation, or charge it when ``released_anything`` is true."""
    principal.require_participant(participant_id)
    _owned(request, participant_id, asset_id, reservation_id)
    context(request).ledger.abort(reservation_id, released_anything=body.released_anything)
    return _current(request, reservation_id)


@router.get(
    _BASE + "/epsilon-spent", response_model=EpsilonSpentOut, responses=problem_responses(404)
)
def epsilon_spent(
    request: Request, participant_id: ParticipantId, asset_id: AssetId, principal: ReadBudgets
) -> EpsilonSpentOut:
    """Return the epsilon of the committed history, recomputed from its mechanism events."""
    principal.require_participant(participant_id)
    spent = context(request).ledger.epsilon_spent(participant_id, asset_id)
    return EpsilonSpentOut(
        participant_id=participant_id, asset_id=asset_id, epsilon_spent=str(spent)
    )


@router.post(
    _BASE + "/calibrate-noise",
    response_model=CalibrateOut,
    responses=problem_responses(404, 409, 422),
)
def calibrate_noise(
    request: Request,
    participant_id: ParticipantId,
    asset_id: AssetId,
    body: CalibrateIn,
    principal: ReadBudgets,
) -> CalibrateOut:
    """Return the smallest noise multiplier keeping history plus the plan within budget.

    Reads only: nothing is held (409 ``LEDGER_CALIBRATION_IMPOSSIBLE`` when no
    noise multiplier fits).
    """
    principal.require_participant(participant_id)
    sigma = context(request).ledger.calibrate_noise(
        participant_id,
        asset_id,
        rounds=body.rounds,
        steps_per_round=body.steps_per_round,
        sample_rate=body.sample_rate,
        max_grad_norm=body.max_grad_norm,
        epsilon=body.epsilon,
    )
    return CalibrateOut(participant_id=participant_id, asset_id=asset_id, noise_multiplier=sigma)
