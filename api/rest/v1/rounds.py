"""``/v1/rounds``: round status, outlier decisions and the decryption log.

Reads :class:`privacy_ledger.RoundStore`: the stored round (stage, the
configuration and the decisions the round applied, never the uploaded
payloads), its upload evidence and its decryption requests. A participant
reads round status and only its own outlier decision (its score); the
decryption log is for officers, administrators and services.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel
from sqlalchemy import select

from api.rest.auth import ReadRounds, context
from api.rest.errors import Forbidden
from api.rest.problems import problem_responses
from api.rest.v1.schemas import ID_PATTERN
from privacy_ledger.models import RoundRow

__all__ = ["router"]

router = APIRouter(prefix="/rounds", tags=["rounds"], responses=problem_responses(401, 403))

RoundId = Annotated[str, Path(pattern=ID_PATTERN, max_length=128)]


class RoundSummary(BaseModel):
    """A stored round: id, protocol stage and timestamps (epoch seconds)."""

    round_id: str
    stage: str
    created_at: float
    updated_at: float


class RoundList(BaseModel):
    """Stored rounds, newest first."""

    rounds: list[RoundSummary]


class RoundStatus(RoundSummary):
    """One round: stage, participants that uploaded, exclusions and the reason it ended."""

    uploads: int
    participants: list[str]
    excluded: list[str]
    reason: str | None
    decryption_requests: int


class Decision(BaseModel):
    """The outlier filter's decision for one participant (score, thresholds, action, factor)."""

    participant_id: str
    decision: dict[str, Any]
    weight: float | None


class DecisionList(BaseModel):
    """Outlier decisions of a round (a participant: only its own)."""

    round_id: str
    decisions: list[Decision]


class DecryptionOut(BaseModel):
    """One decryption request: who asked, what, how large."""

    requester: str
    kind: str
    what: str
    aggregate_size: int
    created_at: float


class DecryptionList(BaseModel):
    """The decryption log of a round, in arrival order."""

    round_id: str
    decryptions: list[DecryptionOut]


@router.get("", response_model=RoundList)
def list_rounds(
    request: Request,
    _principal: ReadRounds,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> RoundList:
    """Return the stored rounds, newest first."""
    stmt = (
        select(RoundRow.id, RoundRow.stage, RoundRow.created_at, RoundRow.updated_at)
        .order_by(RoundRow.created_at.desc(), RoundRow.id)
        .limit(limit)
    )
    with context(request).sessions() as session:
        rows = list(session.execute(stmt).all())
    return RoundList(
        rounds=[
            RoundSummary(round_id=r, stage=s, created_at=c, updated_at=u) for r, s, c, u in rows
        ]
    )


def _names(value: object) -> list[str]:
    if isinstance(value, dict):
        return sorted(str(k) for k in value)
    if isinstance(value, list | tuple | set):
        return sorted(str(v) for v in value)
    return []


@router.get("/{round_id}", response_model=RoundStatus, responses=problem_responses(404))
def round_status(request: Request, round_id: RoundId, _principal: ReadRounds) -> RoundStatus:
    """Return one round's stage, who uploaded, who was excluded and why it ended."""
    ctx = context(request)
    record = ctx.rounds.load(round_id)
    uploads = ctx.rounds.uploads(round_id)
    state = record.state
    reason = state.get("reason")
    return RoundStatus(
        round_id=record.id,
        stage=record.stage,
        created_at=record.created_at,
        updated_at=record.updated_at,
        uploads=len(uploads),
        participants=sorted(
            {u.participant_id for u in uploads} | set(_names(state.get("uploads")))
        ),
        excluded=_names(state.get("excluded")),
        reason=None if reason is None else str(reason),
        decryption_requests=len(ctx.rounds.decryptions(round_id)),
    )


@router.get("/{round_id}/outliers", response_model=DecisionList, responses=problem_responses(404))
def outliers(request: Request, round_id: RoundId, principal: ReadRounds) -> DecisionList:
    """Return the outlier decisions the round applied (a participant: its own only)."""
    state = context(request).rounds.load(round_id).state
    decisions = state.get("decisions")
    weights = state.get("weights")
    rows: list[Decision] = []
    for pid in _names(decisions):
        if not principal.sees_everyone and pid != principal.participant_id:
            continue
        value = decisions[pid] if isinstance(decisions, dict) else {}
        weight = weights.get(pid) if isinstance(weights, dict) else None
        rows.append(
            Decision(
                participant_id=pid,
                decision=dict(value) if isinstance(value, dict) else {"value": value},
                weight=float(weight) if isinstance(weight, int | float) else None,
            )
        )
    return DecisionList(round_id=round_id, decisions=rows)


@router.get(
    "/{round_id}/decryptions", response_model=DecryptionList, responses=problem_responses(404)
)
def decryptions(request: Request, round_id: RoundId, principal: ReadRounds) -> DecryptionList:
    """Return the decryption log of a round (not for participants)."""
    if not principal.sees_everyone:
        raise Forbidden("participants may not read the decryption log", reason="API_FORBIDDEN")
    ctx = context(request)
    ctx.rounds.load(round_id)  # 404 for an unknown round
    rows = [
        DecryptionOut(
            requester=d.requester,
            kind=d.kind,
            what=d.what,
            aggregate_size=d.aggregate_size,
            created_at=d.created_at,
        )
        for d in ctx.rounds.decryptions(round_id)
    ]
    return DecryptionList(round_id=round_id, decryptions=rows)
