"""``/v1/participants``: who takes part, and registration by administrators.

Registration goes through :class:`privacy_ledger.budget.participants.ParticipantRegistry`
(the ledger's own checks, audited as ``participant.registered``). A
participant sees only itself in the list.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from api.rest.auth import ReadBudgets, WriteParticipants, context
from api.rest.problems import problem_responses
from api.rest.v1.schemas import ID_PATTERN
from privacy_ledger.models import DataAsset, Participant

__all__ = ["router"]

router = APIRouter(
    prefix="/participants", tags=["participants"], responses=problem_responses(401, 403)
)

ParticipantId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]


class ParticipantOut(BaseModel):
    """A registered participant and the ids of its data assets."""

    participant_id: str
    institution: str
    kind: str
    status: str
    assets: list[str]


class ParticipantList(BaseModel):
    """Participants visible to the caller."""

    participants: list[ParticipantOut]


class ParticipantIn(BaseModel):
    """A participant to register."""

    model_config = ConfigDict(extra="forbid")

    participant_id: str = Field(pattern=ID_PATTERN, max_length=128)
    institution: str = Field(min_length=1, max_length=256)
    kind: str = Field(pattern="^(hospital|bank|other)$")
    public_key_pem: str | None = Field(default=None, max_length=4096)


class AssetIn(BaseModel):
    """A data asset to register for a participant."""

    model_config = ConfigDict(extra="forbid")

    asset_id: str = Field(pattern=ID_PATTERN, max_length=128)
    description: str = Field(default="", max_length=2000)


def _load(request: Request, only: str | None) -> list[ParticipantOut]:
    stmt = select(Participant).order_by(Participant.id)
    if only is not None:
        stmt = stmt.where(Participant.id == only)
    with context(request).sessions() as session:
        rows = list(session.execute(stmt).scalars())
        assets: dict[str, list[str]] = {}
        for pid, aid in session.execute(
            select(DataAsset.participant_id, DataAsset.asset_id).order_by(DataAsset.asset_id)
        ):
            assets.setdefault(pid, []).append(aid)
    return [
        ParticipantOut(
            participant_id=r.id,
            institution=r.institution,
            kind=r.kind,
            status=r.status,
            assets=assets.get(r.id, []),
        )
        for r in rows
    ]


@router.get("", response_model=ParticipantList)
def list_participants(request: Request, principal: ReadBudgets) -> ParticipantList:
    """Return the registered participants (a participant: only itself)."""
    only = None if principal.sees_everyone else principal.participant_id
    return ParticipantList(participants=_load(request, only))


@router.post(
    "",
    response_model=ParticipantOut,
    status_code=201,
    responses=problem_responses(409, 422),
)
def register_participant(
    request: Request, body: ParticipantIn, _principal: WriteParticipants
) -> ParticipantOut:
    """Register a participant (administrators; the same attributes again is a no-op)."""
    pem = None if body.public_key_pem is None else body.public_key_pem.encode("ascii", "replace")
    context(request).ledger.register_participant(
        body.participant_id, institution=body.institution, kind=body.kind, public_key_pem=pem
    )
    return _load(request, body.participant_id)[0]


@router.post(
    "/{participant_id}/assets",
    response_model=ParticipantOut,
    status_code=201,
    responses=problem_responses(404, 422),
)
def register_asset(
    request: Request, participant_id: ParticipantId, body: AssetIn, _principal: WriteParticipants
) -> ParticipantOut:
    """Register a data asset of a participant (administrators)."""
    context(request).ledger.register_asset(
        participant_id, body.asset_id, description=body.description
    )
    return _load(request, participant_id)[0]
