"""Report sections copied from ledger tables that the audit log does not cover.

Participants (institution, kind, status, SM3 fingerprint of the registered
SM2 key), upload evidence rows (``uploads``: digest, size, kind, shape) and
decryption-request rows are stored in tables, not in signed audit entries:
a bundle carries them under the report's own signature only, marked with
their source. ``cross_check`` compares each budget's limit and spent epsilon
in the tables with what the signed log yields.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compliance.scope import NOT_RECORDED, Scope, timestamp
from compliance.spool import Spools
from crypto import CryptoError
from crypto.sm import SM2PublicKey
from privacy_ledger.budget import accountant as acc
from privacy_ledger.budget.event_rows import event_of
from privacy_ledger.errors import LedgerError
from privacy_ledger.models import (
    Budget,
    DataAsset,
    DecryptionRequestRow,
    Participant,
    PrivacyEventRow,
    RoundRow,
    UploadRow,
)

__all__ = ["add_tables", "federation_summary"]

_BATCH = 2000


def _epoch(bound: str | None) -> float | None:
    if bound is None:
        return None
    return datetime.strptime(bound, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _fingerprint(pem: bytes | None) -> str:
    if pem is None:
        return NOT_RECORDED
    try:
        return SM2PublicKey.from_pem(pem).fingerprint()
    except CryptoError:
        return "unreadable key"


def _participants(session: Session, scope: Scope) -> Iterator[dict[str, Any]]:
    query = select(Participant).order_by(Participant.id)
    if scope.participant is not None:
        query = query.where(Participant.id == scope.participant)
    for p in session.scalars(query):
        assets = session.scalars(
            select(DataAsset.asset_id)
            .where(DataAsset.participant_id == p.id)
            .order_by(DataAsset.asset_id)
        )
        yield {
            "participant": p.id,
            "institution": p.institution,
            "kind": p.kind,
            "status": p.status,
            "key_fingerprint": _fingerprint(p.public_key_pem),
            "registered_at": timestamp(p.created_at),
            "assets": list(assets),
        }


def _period(query: Any, column: Any, scope: Scope) -> Any:
    start, end = _epoch(scope.start), _epoch(scope.end)
    if start is not None:
        query = query.where(column >= start)
    if end is not None:
        query = query.where(column < end)
    return query


def _uploads(session: Session, scope: Scope) -> Iterator[dict[str, Any]]:
    query = _period(select(UploadRow).order_by(UploadRow.id), UploadRow.created_at, scope)
    if scope.participant is not None:
        query = query.where(UploadRow.participant_id == scope.participant)
    for u in session.scalars(query.execution_options(yield_per=_BATCH)):
        yield {
            "source": "ledger table uploads",
            "id": u.id,
            "time": timestamp(u.created_at),
            "round": u.round_id,
            "participant": u.participant_id,
            "kind": u.kind,
            "shape": list(u.shape),
            "bytes": u.size,
            "digest": u.digest,
        }


def _decryptions(session: Session, scope: Scope) -> Iterator[dict[str, Any]]:
    query = select(DecryptionRequestRow).order_by(DecryptionRequestRow.id)
    query = _period(query, DecryptionRequestRow.created_at, scope)
    if scope.participant is not None:
        return  # the table does not say whose data an aggregate covers
    for d in session.scalars(query.execution_options(yield_per=_BATCH)):
        yield {
            "source": "ledger table decryption_requests",
            "id": d.id,
            "time": timestamp(d.created_at),
            "round": d.round_id,
            "requester": d.requester,
            "kind": d.kind,
            "what": d.what,
            "aggregate_size": d.aggregate_size,
        }


def _spent(session: Session, budget: Budget) -> str:
    rows = session.scalars(
        select(PrivacyEventRow).where(
            PrivacyEventRow.participant_id == budget.participant_id,
            PrivacyEventRow.asset_id == budget.asset_id,
            PrivacyEventRow.state == "committed",
        )
    )
    try:
        events = [event_of(r) for r in rows]
        return str(acc.epsilon(events, delta=budget.delta, accountant=budget.accountant))
    except LedgerError as exc:
        return f"not computable ({exc.code})"


def _cross_check(session: Session, scope: Scope, spools: Spools) -> Iterator[dict[str, Any]]:
    if scope.end is not None:
        return  # the tables hold today's state, not the state at the end of the period
    filed = {(r["participant"], r["asset"]): r for r in spools.rows("dp_filing")}
    query = select(Budget).order_by(Budget.participant_id, Budget.asset_id)
    if scope.participant is not None:
        query = query.where(Budget.participant_id == scope.participant)
    for budget in session.scalars(query):
        row = filed.get((budget.participant_id, budget.asset_id), {})
        pairs = (
            ("epsilon_limit", budget.epsilon_limit),
            ("epsilon_spent", _spent(session, budget)),
        )
        for item, table_value in pairs:
            logged = str(row.get(item, NOT_RECORDED))
            agree = logged == table_value or _same_number(logged, table_value)
            yield {
                "participant": budget.participant_id,
                "asset": budget.asset_id,
                "item": item,
                "audit_log": logged,
                "ledger_tables": table_value,
                "agree": agree,
            }


def _same_number(a: str, b: str) -> bool:
    try:
        return Decimal(a) == Decimal(b)
    except ArithmeticError:
        return False


def add_tables(session: Session, scope: Scope, spools: Spools) -> None:
    """Spool the table-backed sections (participants, uploads, decryption requests, cross-check)."""
    for name, rows in (
        ("participants", _participants(session, scope)),
        ("uploads", _uploads(session, scope)),
        ("decryption_requests", _decryptions(session, scope)),
        ("cross_check", _cross_check(session, scope, spools)),
    ):
        for row in rows:
            spools.add(name, row)


def federation_summary(session: Session, scope: Scope) -> dict[str, Any]:
    """Round namespaces and round stages recorded in the ``rounds`` table (in the period)."""
    query = _period(select(RoundRow.id, RoundRow.stage), RoundRow.created_at, scope)
    namespaces: set[str] = set()
    stages: dict[str, int] = {}
    for round_id, stage in session.execute(query):
        namespaces.add(round_id.split(":", 1)[0] if ":" in round_id else NOT_RECORDED)
        stages[stage] = stages.get(stage, 0) + 1
    return {
        "round_namespaces": sorted(namespaces),
        "rounds_by_stage": stages,
        "source": "ledger table rounds",
    }
