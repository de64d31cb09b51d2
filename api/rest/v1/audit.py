"""``/v1/audit``: entries (paged), signed tree heads as checkpoints, inclusion, consistency.

Proofs come from :class:`privacy_ledger.AuditLog` (RFC 9162 section 2.1.3
and 2.1.4 over SM3); heads are served exactly as stored: the C2SP checkpoint
text and its DER SM2 signature (base64), so ``openssl dgst -sm3 -verify``
checks them (docs/audit/verify.md). A participant sees only entries whose
subject is itself (``participant:<id>...``) and proofs for those entries.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel
from sqlalchemy import or_, select

from api.rest.auth import Principal, ReadAudit, context
from api.rest.errors import Forbidden, NotFound
from api.rest.problems import problem_responses
from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import LOG_STATE_ID, AuditEntryRow, LogStateRow, TreeHeadRow
from privacy_ledger.errors import ProofRangeInvalid

__all__ = ["router"]

router = APIRouter(prefix="/audit", tags=["audit"], responses=problem_responses(401, 403))

_MAX_INDEX = 2**62


class EntryOut(BaseModel):
    """One audit entry: the canonical JSON bytes (base64) and their decoded form."""

    index: int
    event: str
    subject: str
    leaf_hash: str
    entry_b64: str
    entry: dict[str, Any]


class EntryPage(BaseModel):
    """A page of entries in index order."""

    log_size: int
    offset: int
    limit: int
    entries: list[EntryOut]


class HeadOut(BaseModel):
    """A signed tree head: the checkpoint text and its DER SM2 signature (base64)."""

    seq: int
    tree_size: int
    root_hash: str
    checkpoint: str
    signature_b64: str
    key_fingerprint: str
    signed_at: float
    public_key_pem: str | None


class HeadPage(BaseModel):
    """Signed tree heads, oldest first."""

    heads: list[HeadOut]


class InclusionOut(BaseModel):
    """Audit path of an entry in the tree of ``tree_size`` entries (hex hashes)."""

    index: int
    tree_size: int
    leaf_hash: str
    proof: list[str]


class ConsistencyOut(BaseModel):
    """Consistency proof between two tree sizes (hex hashes)."""

    first: int
    second: int
    proof: list[str]


def _is_own(principal: Principal, subject: str) -> bool:
    pid = principal.participant_id
    return subject == f"participant:{pid}" or subject.startswith(f"participant:{pid}/")


def _own(principal: Principal) -> Any:
    pid = principal.participant_id
    return or_(
        AuditEntryRow.subject == f"participant:{pid}",
        AuditEntryRow.subject.startswith(f"participant:{pid}/"),
    )


def _entry(row: AuditEntryRow) -> EntryOut:
    return EntryOut(
        index=row.entry_index,
        event=row.event,
        subject=row.subject,
        leaf_hash=row.leaf_hash.hex(),
        entry_b64=base64.b64encode(row.entry).decode("ascii"),
        entry=dict(canonical.decode(row.entry)),
    )


@router.get("/entries", response_model=EntryPage)
def entries(
    request: Request,
    principal: ReadAudit,
    offset: Annotated[int, Query(ge=0, le=_MAX_INDEX)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> EntryPage:
    """Return entries from index ``offset`` on (a participant: only its own)."""
    ctx = context(request)
    stmt = select(AuditEntryRow).where(AuditEntryRow.entry_index >= offset)
    if not principal.sees_everyone:
        stmt = stmt.where(_own(principal))
    stmt = stmt.order_by(AuditEntryRow.entry_index).limit(limit)
    with ctx.sessions() as session:
        rows = list(session.execute(stmt).scalars())
        size = ctx.audit.size(session)
    return EntryPage(log_size=size, offset=offset, limit=limit, entries=[_entry(r) for r in rows])


def _public_key(request: Request) -> str | None:
    with context(request).sessions() as session:
        pem = session.scalar(
            select(LogStateRow.public_key_pem).where(LogStateRow.id == LOG_STATE_ID)
        )
    return None if pem is None else pem.decode("ascii")


def _head(row: TreeHeadRow, pem: str | None) -> HeadOut:
    return HeadOut(
        seq=row.seq,
        tree_size=row.tree_size,
        root_hash=row.root_hash.hex(),
        checkpoint=row.body.decode("utf-8"),
        signature_b64=base64.b64encode(row.signature).decode("ascii"),
        key_fingerprint=row.key_fingerprint,
        signed_at=row.signed_at,
        public_key_pem=pem,
    )


@router.get("/head", response_model=HeadOut, responses=problem_responses(404))
def latest_head(request: Request, _principal: ReadAudit) -> HeadOut:
    """Return the latest signed tree head (checkpoint text + DER signature, base64)."""
    with context(request).sessions() as session:
        row = session.scalar(select(TreeHeadRow).order_by(TreeHeadRow.seq.desc()).limit(1))
    if row is None:
        raise NotFound("the audit log has no signed tree head yet")
    return _head(row, _public_key(request))


@router.get("/heads", response_model=HeadPage)
def heads(
    request: Request,
    _principal: ReadAudit,
    offset: Annotated[int, Query(ge=0, le=_MAX_INDEX)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> HeadPage:
    """Return signed tree heads (checkpoints), oldest first."""
    stmt = select(TreeHeadRow).order_by(TreeHeadRow.seq).offset(offset).limit(limit)
    with context(request).sessions() as session:
        rows = list(session.execute(stmt).scalars())
    pem = _public_key(request)
    return HeadPage(heads=[_head(r, pem) for r in rows])


@router.get(
    "/entries/{index}/inclusion",
    response_model=InclusionOut,
    responses=problem_responses(404, 422),
)
def inclusion(
    request: Request,
    index: Annotated[int, Path(ge=0, le=_MAX_INDEX)],
    principal: ReadAudit,
    tree_size: Annotated[int | None, Query(ge=1, le=_MAX_INDEX)] = None,
) -> InclusionOut:
    """Return the inclusion proof of entry ``index`` (default: in the whole log)."""
    ctx = context(request)
    with ctx.sessions() as session:
        row = session.get(AuditEntryRow, index)
        if row is None:
            raise NotFound(f"index: entry {index} does not exist")
        if not principal.sees_everyone and not _is_own(principal, row.subject):
            raise Forbidden(
                f"entry {index} is not about participant {principal.participant_id!r}",
                reason="API_OTHER_PARTICIPANT",
            )
        size = tree_size if tree_size is not None else ctx.audit.size(session)
        if index >= size:
            raise ProofRangeInvalid(f"tree_size: {size} must exceed index {index}")
        proof = ctx.audit.inclusion_proof(session, index, size)
        return InclusionOut(
            index=index,
            tree_size=size,
            leaf_hash=row.leaf_hash.hex(),
            proof=[p.hex() for p in proof],
        )


@router.get("/consistency", response_model=ConsistencyOut, responses=problem_responses(422))
def consistency(
    request: Request,
    _principal: ReadAudit,
    first: Annotated[int, Query(ge=0, le=_MAX_INDEX)],
    second: Annotated[int, Query(ge=0, le=_MAX_INDEX)],
) -> ConsistencyOut:
    """Return the consistency proof between the trees of ``first`` and ``second`` entries."""
    if first > second:
        raise ProofRangeInvalid(f"first: {first} must not exceed second {second}")
    ctx = context(request)
    with ctx.sessions() as session:
        proof = ctx.audit.consistency_proof(session, first, second)
    return ConsistencyOut(first=first, second=second, proof=[p.hex() for p in proof])
