"""Errors as ``application/problem+json`` (RFC 9457), mapped to HTTP statuses in one table.

Every error a route can raise is a typed error of some package carrying a
stable ``code`` (``docs/audit/errors-*.md``). :data:`STATUS_BY_CODE` maps those
codes to HTTP statuses; a code not in the table falls back on its package's
default (:data:`DEFAULT_STATUS`). The problem's ``type`` is a URN naming the
code, ``title`` the code itself, ``detail`` the error's message; a validation
problem also lists the failing fields in ``errors``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.rest.errors import (
    AccessDenied,
    BodyTooLarge,
    Forbidden,
    InternalFault,
    MethodNotAllowed,
    NotFound,
    NotReady,
    ReportCrossCheckMismatch,
    RequestInvalid,
    RestError,
    ServiceMisconfigured,
    Unauthenticated,
)
from compliance.errors import ComplianceError
from privacy_ledger.errors import BudgetExceeded, LedgerError

__all__ = [
    "DEFAULT_STATUS",
    "PROBLEM_JSON",
    "Problem",
    "STATUS_BY_CODE",
    "install_problem_handlers",
    "problem_response",
    "problem_responses",
    "render_error",
    "status_of",
]

logger = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"

#: HTTP status of every stable error code a route can raise (one place).
STATUS_BY_CODE: Mapping[str, int] = {
    # api.rest
    Unauthenticated.code: 401,
    Forbidden.code: 403,
    AccessDenied.code: 403,
    NotFound.code: 404,
    MethodNotAllowed.code: 405,
    BodyTooLarge.code: 413,
    RequestInvalid.code: 422,
    NotReady.code: 503,
    ServiceMisconfigured.code: 503,
    ReportCrossCheckMismatch.code: 409,
    InternalFault.code: 500,
    # privacy_ledger
    "LEDGER_TOKEN_INVALID": 401,
    "LEDGER_TOKEN_EXPIRED": 401,
    "LEDGER_TOKEN_REVOKED": 401,
    "LEDGER_TOKEN_ERROR": 401,
    "LEDGER_TOKEN_UNKNOWN": 404,
    "LEDGER_PARTICIPANT_UNKNOWN": 404,
    "LEDGER_ASSET_UNKNOWN": 404,
    "LEDGER_BUDGET_NOT_SET": 404,
    "LEDGER_ROUND_UNKNOWN": 404,
    "LEDGER_RESERVATION_UNKNOWN": 404,
    "LEDGER_RECEIPT_UNAVAILABLE": 404,
    "LEDGER_RECEIPT_INVALID": 422,
    "LEDGER_PARTICIPANT_CONFLICT": 409,
    "LEDGER_PARTICIPANT_SUSPENDED": 409,
    "LEDGER_BUDGET_EXCEEDED": 409,
    "LEDGER_CALIBRATION_IMPOSSIBLE": 409,
    "LEDGER_RESERVATION_CONFLICT": 409,
    "LEDGER_RESERVATION_NOT_ACTIVE": 409,
    "LEDGER_RESERVATION_EXPIRED": 409,
    "LEDGER_PARAMETER_INVALID": 422,
    "LEDGER_MECHANISM_INVALID": 422,
    "LEDGER_ACCOUNTANT_NOT_ALLOWED": 422,
    "LEDGER_PROOF_RANGE_INVALID": 422,
    "LEDGER_AUDIT_PARAMETER_INVALID": 422,
    "LEDGER_CANONICAL_JSON_INVALID": 422,
    "LEDGER_LOG_NOT_INITIALIZED": 404,
    "LEDGER_SCHEMA_OUTDATED": 503,
    "LEDGER_DATABASE_URL_INVALID": 503,
    "LEDGER_LOG_KEY_MISMATCH": 503,
    "LEDGER_LOG_TAMPERED": 500,
    "LEDGER_HEAD_TAMPERED": 500,
    "LEDGER_HEADS_INCONSISTENT": 500,
    # compliance
    "COMPLIANCE_PARAMETER_INVALID": 422,
    "COMPLIANCE_FORMAT_UNKNOWN": 422,
    "COMPLIANCE_SIGNING_KEY_REQUIRED": 503,
    "COMPLIANCE_LEDGER_UNVERIFIED": 409,
    "COMPLIANCE_NO_SIGNED_HEAD": 409,
}

#: Fallback status per error base class, for codes not in :data:`STATUS_BY_CODE`.
DEFAULT_STATUS: Mapping[type[Exception], int] = {
    RestError: 400,
    LedgerError: 422,
    ComplianceError: 422,  # every bundle-verification failure: the uploaded bundle is bad
}

_TITLE_URN = "urn:secure-fed:error:"


class Problem(BaseModel):
    """An RFC 9457 problem details object (``application/problem+json``)."""

    type: str = Field(description="URN naming the stable error code.")
    title: str = Field(description="The stable error code (docs/audit/errors-*.md).")
    status: int = Field(description="The HTTP status.")
    detail: str = Field(description="What was wrong, for a human.")
    instance: str = Field(description="The request path.")
    code: str = Field(description="The stable error code (same as title).")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="Failing fields of a validation problem."
    )
    budget: dict[str, str] | None = Field(
        default=None,
        description="LEDGER_BUDGET_EXCEEDED: limit, spent, reserved, requested epsilon.",
    )


def status_of(exc: Exception) -> int:
    """Return the HTTP status of a typed error (its code, else its package default)."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code in STATUS_BY_CODE:
        return STATUS_BY_CODE[code]
    for base, status in DEFAULT_STATUS.items():
        if isinstance(exc, base):
            return status
    return 500


def problem_response(
    request: Request,
    *,
    code: str,
    status: int,
    detail: str,
    errors: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
    budget: dict[str, str] | None = None,
) -> JSONResponse:
    """Return a problem+json response for ``code`` at ``status``."""
    body = Problem(
        type=_TITLE_URN + code,
        title=code,
        status=status,
        detail=detail,
        instance=request.url.path[:512],
        code=code,
        errors=errors,
        budget=budget,
    )
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=dict(headers or {}),
    )


def render_error(request: Request, exc: Exception) -> JSONResponse:
    """Render a typed error (``code``, ``message``) as its problem at its status."""
    status = status_of(exc)
    code = str(getattr(exc, "code", InternalFault.code))
    message = str(getattr(exc, "message", exc))
    if status >= 500:
        logger.error("%s on %s %s: %s", code, request.method, request.url.path, message)
    headers = {"WWW-Authenticate": 'Bearer realm="secure-fed"'} if status == 401 else None
    budget, errors = None, None
    if isinstance(exc, ReportCrossCheckMismatch):
        errors = [dict(r) for r in exc.rows[:50]]
    if isinstance(exc, BudgetExceeded):
        budget = {
            name: str(getattr(exc, name)) for name in ("limit", "spent", "reserved", "requested")
        }
    return problem_response(
        request,
        code=code,
        status=status,
        detail=message,
        headers=headers,
        budget=budget,
        errors=errors,
    )


async def _on_typed(request: Request, exc: Exception) -> JSONResponse:
    return render_error(request, exc)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))}
        for e in exc.errors()
    ][:20]
    first = errors[0] if errors else {"loc": [], "msg": "invalid"}
    detail = f"{'.'.join(first['loc'])}: {first['msg']}"
    return problem_response(
        request, code=RequestInvalid.code, status=422, detail=detail, errors=errors
    )


_HTTP_CODES = {404: NotFound.code, 405: MethodNotAllowed.code, 413: BodyTooLarge.code}


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, RequestInvalid.code)
    headers = dict(exc.headers or {})
    return problem_response(
        request, code=code, status=exc.status_code, detail=str(exc.detail), headers=headers
    )


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected failure on %s %s", request.method, request.url.path)
    return problem_response(
        request, code=InternalFault.code, status=500, detail="internal error (see the server log)"
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Render every error raised by a route as problem+json (denials are audited elsewhere)."""
    for base in (RestError, LedgerError, ComplianceError):
        app.add_exception_handler(base, _on_typed)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries documenting problem+json for ``statuses``."""
    return {
        status: {"model": Problem, "content": {PROBLEM_JSON: {}}, "description": "Problem"}
        for status in statuses
    }
