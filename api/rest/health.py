"""Liveness, readiness and the Prometheus metrics endpoint (outside ``/v1``).

``/healthz`` answers while the process runs; ``/readyz`` only when the ledger
database answers and its schema is at the newest migration (Kubernetes probe
conventions). ``/metrics`` needs a token with ``metrics:read``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

from api.rest.auth import ReadMetrics, context
from api.rest.errors import NotReady
from api.rest.metrics import CONTENT_TYPE
from api.rest.problems import problem_responses
from privacy_ledger.db import current_revision, head_revision

__all__ = ["router", "Health", "Readiness"]

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """The process is alive."""

    status: str


class Readiness(BaseModel):
    """The ledger answers at the expected schema revision."""

    status: str
    schema_revision: str | None


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Liveness: the process serves requests."""
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness, responses=problem_responses(503))
def readyz(request: Request) -> Readiness:
    """Readiness: the ledger database answers and its schema is current.

    Raises
    ------
    NotReady
        When the database is unreachable or at another schema revision.
    """
    try:
        found = current_revision(context(request).engine)
    except SQLAlchemyError as exc:
        raise NotReady(f"ledger database unreachable: {type(exc).__name__}") from None
    wanted = head_revision()
    if found != wanted:
        raise NotReady(f"ledger schema at {found!r}, this service needs {wanted!r}")
    return Readiness(status="ready", schema_revision=found)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE.split(";")[0]: {}}, "description": "Prometheus text"},
        **problem_responses(401, 403),
    },
)
def metrics(request: Request, _principal: ReadMetrics) -> Response:
    """Prometheus metrics (requests by route and status, latency, denials, budget refusals)."""
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE)
