"""Audit-backed pages: decisions and decryptions as the log records them, and chain status.

Outlier decisions and decryption events are derived from the audit entries
by the compliance report's own :class:`compliance.derive.Deriver`, so a row
here says exactly what the same row of an exported report says (a value the
entry does not carry shows as ``not recorded``). The chain status is
:func:`privacy_ledger.verify_log` run over the whole log (signatures of
every signed tree head, every entry's hash chain and the Merkle roots,
RFC 9162 / C2SP checkpoints over SM3 and SM2), with the pinned log key when
the service is configured with one, else the key the log itself records, then
:func:`~privacy_ledger.audit.verify.budgets.check_budget_limits`: every stored
budget must be what its newest ``budget.set`` entry records, as ``secure-fed
ledger verify`` requires.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, not_, or_, select

from api.rest.context import AppContext
from compliance.derive import Deriver
from compliance.scope import Scope
from privacy_ledger import LedgerError, VerificationReport, verify_log
from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import AuditEntryRow, TreeHeadRow
from privacy_ledger.audit.verify.budgets import check_budget_limits
from privacy_ledger.audit.verify.log import stored_public_key

__all__ = ["MAX_AUDIT_ROWS", "ChainStatus", "Head", "audit_rows", "chain_status", "latest_head"]

#: Newest matching audit entries read for the decision and decryption pages.
MAX_AUDIT_ROWS = 2000
#: Subject prefix of the REST service's own denials (api.rest.denials), never decryption refusals.
_API_SUBJECT = "api:"


@dataclass(frozen=True)
class Head:
    """The latest signed tree head: size, root, checkpoint text, signer, time."""

    seq: int
    tree_size: int
    root_hash: str
    checkpoint: str
    key_fingerprint: str
    signed_at: float


@dataclass(frozen=True)
class ChainStatus:
    """Result of verifying the whole audit log now."""

    verified: bool
    report: VerificationReport | None
    error_code: str | None
    error: str | None
    key_pinned: bool
    head: Head | None
    seconds: float


def _entries(ctx: AppContext, limit: int) -> list[tuple[int, bytes]]:
    wanted = or_(
        AuditEntryRow.event == "outlier.decision",
        AuditEntryRow.event.startswith("decryption."),
        and_(  # refusals by the key authority or helper; the API's own denials are "api:..."
            AuditEntryRow.event == "access.denied",
            not_(AuditEntryRow.subject.startswith(_API_SUBJECT)),
        ),
    )
    stmt = select(AuditEntryRow.entry_index, AuditEntryRow.entry).where(wanted)
    stmt = stmt.order_by(AuditEntryRow.entry_index.desc()).limit(limit)
    with ctx.sessions() as session:
        rows = list(session.execute(stmt).all())
    return [(index, data) for index, data in reversed(rows)]


def audit_rows(
    ctx: AppContext, *, rounds: Collection[str] | None = None, limit: int = MAX_AUDIT_ROWS
) -> dict[str, list[dict[str, Any]]]:
    """Return the ``outlier_decisions`` and ``decryptions`` report rows, oldest first.

    Parameters
    ----------
    ctx
        The service's context.
    rounds
        Only rows whose ``round`` field is one of these ids (a round's store
        id and its protocol number: :attr:`RoundDetail.aliases`).
    limit
        Newest candidate entries read (the page says when it is reached).
    """
    rows: dict[str, list[dict[str, Any]]] = {"outlier_decisions": [], "decryptions": []}

    def sink(section: str, row: dict[str, Any]) -> None:
        if section in rows and (rounds is None or str(row.get("round")) in rounds):
            rows[section].append(row)

    deriver = Deriver(scope=Scope(), sink=sink)
    for index, data in _entries(ctx, limit):
        deriver.feed(index, canonical.decode(data))
    return rows


def latest_head(ctx: AppContext) -> Head | None:
    """Return the newest signed tree head as stored (``None`` before the first)."""
    with ctx.sessions() as session:
        row = session.scalar(select(TreeHeadRow).order_by(TreeHeadRow.seq.desc()).limit(1))
        if row is None:
            return None
        return Head(
            seq=row.seq,
            tree_size=row.tree_size,
            root_hash=row.root_hash.hex(),
            checkpoint=row.body.decode("utf-8", "replace"),
            key_fingerprint=row.key_fingerprint,
            signed_at=row.signed_at,
        )


def chain_status(ctx: AppContext) -> ChainStatus:
    """Verify the whole audit log now and return the result with the latest signed head."""
    started = time.perf_counter()
    report, code, message = None, None, None
    try:
        key = ctx.log_public_key or stored_public_key(ctx.engine)
        if key is None:
            code, message = "NO_ENTRIES", "the audit log has no entries and no signing key yet"
        else:
            report = verify_log(ctx.engine, public_key=key)
            check_budget_limits(ctx.engine)  # what `secure-fed ledger verify` checks too
    except LedgerError as exc:
        code, message = exc.code, str(getattr(exc, "message", exc))
    return ChainStatus(
        verified=report is not None and code is None,
        report=report,
        error_code=code,
        error=message,
        key_pinned=ctx.log_public_key is not None,
        head=latest_head(ctx),
        seconds=time.perf_counter() - started,
    )
