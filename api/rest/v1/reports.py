"""``/v1/reports``: compliance reports exported through :mod:`compliance`, and bundle checks.

``GET /v1/reports/export`` runs :func:`compliance.export_report` (which first
verifies the whole audit log) into a temporary file and sends it as an
attachment: a signed JSON bundle (needs ``api_report_key_file``), HTML or PDF.
The console's session cookie is accepted here (GET). Entries not yet under a
signed head are signed first (the service holds the log key). The key authority's and
helper's own audit logs (``api_party_logs_dir``) are verified and cross-checked
too; when any cross-check row disagrees the export is refused with
``API_REPORT_CROSS_CHECK_MISMATCH`` (409), the rows in the problem's ``errors``.
``POST /v1/reports/verify`` checks an uploaded bundle with
:func:`compliance.verify_bundle` against the pinned keys, when configured (the
request size limit applies).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel
from starlette.background import BackgroundTask

from api.rest.auth import BrowserReports, ReadReports, context
from api.rest.context import AppContext
from api.rest.errors import ReportCrossCheckMismatch
from api.rest.problems import problem_responses
from api.rest.v1.schemas import ID_PATTERN
from compliance import ExportResult, Scope, export_report, parse_bound, verify_bundle
from privacy_ledger.errors import LedgerError

__all__ = ["router", "MEDIA_TYPES"]

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/reports", tags=["reports"], responses=problem_responses(401, 403))

#: Media type of each report format.
MEDIA_TYPES = {"json": "application/json", "html": "text/html", "pdf": "application/pdf"}


class VerifiedBundle(BaseModel):
    """What :func:`compliance.verify_bundle` checked in an uploaded bundle."""

    valid: bool
    entries: int
    runs: int
    cited_head_size: int
    newest_head_size: int
    log_key_fingerprint: str
    signer_fingerprint: str
    warnings: list[str]
    meta: dict[str, Any]


def _scope(participant: str | None, start: str | None, end: str | None) -> Scope:
    return Scope(
        participant=participant,
        start=None if start is None else parse_bound(start, name="start", end=False),
        end=None if end is None else parse_bound(end, name="end", end=True),
    )


@router.get(
    "/export",
    response_class=FileResponse,
    responses={
        200: {
            "description": "The report file (attachment).",
            "content": {
                media: {"schema": {"type": "string", "format": "binary"}}
                for media in MEDIA_TYPES.values()
            },
        },
        **problem_responses(409, 422, 503),
    },
)
def export(
    request: Request,
    principal: BrowserReports,
    format: Annotated[str, Query(pattern="^(json|html|pdf)$")] = "html",  # noqa: A002
    participant: Annotated[str | None, Query(pattern=ID_PATTERN, max_length=128)] = None,
    start: Annotated[str | None, Query(max_length=40)] = None,
    end: Annotated[str | None, Query(max_length=40)] = None,
) -> FileResponse:
    """Export the compliance report (json bundle, html or pdf) after verifying the log."""
    ctx = context(request)
    scope = _scope(participant, start, end)
    _sign_pending(ctx)
    folder = Path(tempfile.mkdtemp(prefix="secure-fed-report-"))
    out = folder / f"report.{format}"
    try:
        result = export_report(
            ctx.engine,
            fmt=format,
            out=out,
            scope=scope,
            signing_key=ctx.report_key,
            log_public_key=ctx.log_public_key,
            produced_by=f"{principal.name} ({principal.role}) via secure-fed api"[:256],
            party_logs=ctx.party_logs,
            party_logs_from=ctx.party_logs_from,
        )
        _refuse_disagreements(result)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return FileResponse(
        out,
        media_type=MEDIA_TYPES[format],
        filename=f"secure-fed-report.{format}",
        background=BackgroundTask(shutil.rmtree, folder, True),
    )


def _sign_pending(ctx: AppContext) -> None:
    """Sign the log's pending entries first, so the report covers what the tables hold.

    A report covers the entries under the newest signed head; budget entries the
    service wrote since would otherwise show as a cross-check disagreement. A log
    this service cannot sign (another key) is left as it is: the export says why.
    """
    try:
        with ctx.sessions() as session, session.begin():
            ctx.audit.checkpoint(session, force=True)
    except LedgerError as exc:
        logger.warning("report export: pending entries not signed first: %s", exc)


def _refuse_disagreements(result: ExportResult) -> None:
    """Refuse a report whose cross-check disagrees, as ``secure-fed audit export`` does."""
    rows = [*result.disagreements, *result.party_disagreements]
    if rows:
        raise ReportCrossCheckMismatch(
            f"{len(rows)} cross-check row(s) disagree: the ledger tables, the audit log and "
            "the party logs (key authority, helper) do not record the same; no report is "
            "returned (the rows are in 'errors')",
            rows=rows,
        )


@router.post(
    "/verify",
    response_model=VerifiedBundle,
    responses=problem_responses(413, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
)
async def verify(request: Request, _principal: ReadReports) -> VerifiedBundle:
    """Verify an uploaded JSON bundle (the request body) against the pinned keys."""
    from starlette.concurrency import run_in_threadpool

    ctx = context(request)
    body = await request.body()
    report_public = None if ctx.report_key is None else ctx.report_key.public_key
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        handle.write(body)
        handle.flush()
        report = await run_in_threadpool(
            verify_bundle,
            Path(handle.name),
            public_key=report_public,
            log_public_key=ctx.log_public_key,
        )
    return VerifiedBundle(
        valid=True,
        entries=report.entries,
        runs=report.runs,
        cited_head_size=report.cited_head_size,
        newest_head_size=report.newest_head_size,
        log_key_fingerprint=report.log_key_fingerprint,
        signer_fingerprint=report.signer_fingerprint,
        warnings=list(report.warnings),
        meta=dict(report.meta),
    )
