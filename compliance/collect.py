"""Collect a report from the ledger database: verify, scan, cite, prove.

One read snapshot (PostgreSQL ``REPEATABLE READ``; SQLite's ``BEGIN
IMMEDIATE``) covers the whole collection:

1. the audit log is verified end to end (:func:`privacy_ledger.verify_log`);
   a log that fails is never reported on (:class:`LedgerUnverified`);
2. every entry under the newest signed head is streamed in index order: its
   stored leaf hash goes into a Merkle tree, and the entries the report
   needs are *cited* (copied to a spool) and fed to the
   :class:`~compliance.derive.Deriver`, whose rows are spooled too. A
   federation-wide report cites the whole index range of its period plus one
   boundary entry on each side, so a verifier can tell nothing in between
   was left out;
3. the smallest signed head covering every cited entry becomes the *cited
   head*; each run of consecutive cited entries gets one RFC 9162 inclusion
   proof (for its last entry: the ``prev`` hash chain links the others), and
   a consistency proof links the cited head to the newest head.

The ledger tables the log does not cover (participants and their keys,
upload and decryption-request rows) are added by :mod:`compliance.tables`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from compliance.derive import Deriver
from compliance.errors import LedgerUnverified, NoSignedHead
from compliance.scope import Scope
from compliance.spool import Spools
from compliance.tables import add_tables, federation_summary
from crypto.sm import SM2PublicKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.merkle import SM3_HASHER, MerkleTree
from privacy_ledger.audit.models import LOG_STATE_ID, AuditEntryRow, LogStateRow, TreeHeadRow
from privacy_ledger.audit.proofs import consistency_proof, inclusion_proof
from privacy_ledger.audit.verify.log import VerificationReport, stored_public_key, verify_log
from privacy_ledger.errors import LedgerError

__all__ = ["Collected", "Head", "collect", "snapshot", "CHUNK"]

CHUNK = 5000
ENTRIES = "entries"


@contextmanager
def snapshot(engine: Engine) -> Iterator[Session]:
    """Open one read snapshot of the ledger (REPEATABLE READ on PostgreSQL)."""
    options = {"isolation_level": "REPEATABLE READ"} if engine.dialect.name == "postgresql" else {}
    with engine.connect() as connection:
        with Session(bind=connection.execution_options(**options)) as session, session.begin():
            yield session


@dataclass(frozen=True)
class Head:
    """A signed tree head as stored (size, root, checkpoint body, DER signature)."""

    tree_size: int
    root_hash: bytes
    body: bytes
    signature: bytes


@dataclass
class Collected:
    """Everything a renderer needs: spooled rows and entries, proofs, heads, metadata."""

    scope: Scope
    spools: Spools
    origin: str
    log_key: SM2PublicKey
    key_pinned: bool
    verification: VerificationReport
    cited_head: Head
    newest_head: Head
    consistency: list[bytes]
    proofs: dict[int, list[bytes]]
    cited: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)

    def entries(self) -> Iterator[dict[str, Any]]:
        """Yield the cited entries for the bundle (proof on the last entry of each run)."""
        for row in self.spools.rows(ENTRIES):
            proof = self.proofs.get(int(row["index"]))
            if proof is not None:
                row["proof"] = [base64.b64encode(p).decode("ascii") for p in proof]
            yield row


class _Citer:
    """Decides which scanned entries are cited and tracks runs and the complete range."""

    def __init__(self, scope: Scope, deriver: Deriver, spools: Spools) -> None:
        self.complete = scope.participant is None
        self.scope, self.deriver, self.spools = scope, deriver, spools
        self.first: int | None = 0 if scope.start is None else None
        self.end: int | None = None
        self.previous: tuple[int, bytes, dict[str, Any]] | None = None
        self.run_ends: list[int] = []
        self.last: int | None = None

    def _cite(self, index: int, data: bytes, entry: dict[str, Any]) -> None:
        if self.last is not None and index <= self.last:
            return  # already cited (a budget entry that is also a boundary)
        if self.last is not None and index != self.last + 1:
            self.run_ends.append(self.last)
        self.last = index
        self.spools.add(ENTRIES, {"entry": base64.b64encode(data).decode("ascii"), "index": index})
        self.deriver.feed(index, entry)

    def _in_range(self, index: int, data: bytes, entry: dict[str, Any]) -> bool:
        if self.first is None and entry["time"] >= str(self.scope.start):
            self.first = index
            if self.previous is not None:  # boundary before the range
                self._cite(*self.previous)
        if self.first is None or self.end is not None:
            return False
        if self.scope.end is not None and entry["time"] >= self.scope.end:
            self.end = index  # first entry at or after the end: the boundary after the range
            self._cite(index, data, entry)
            return False
        return True

    def scan(self, index: int, data: bytes) -> None:
        entry = canonical.decode(data)
        if self.complete and self._in_range(index, data, entry):
            self._cite(index, data, entry)
        elif self.last != index and self.deriver.wants(entry):
            self._cite(index, data, entry)
        self.previous = (index, data, entry)

    def finish(self, size: int) -> dict[str, Any]:
        if self.complete and self.first is None and self.previous is not None:
            self._cite(*self.previous)  # nothing in the period: the last entry is the boundary
        if self.last is not None:
            self.run_ends.append(self.last)
        cited_range = None
        if self.complete:
            first = size if self.first is None else self.first
            cited_range = {"first": first, "end": size if self.end is None else self.end}
        return {
            "complete": self.complete,
            "range": cited_range,
            "entries": self.spools.count(ENTRIES),
            "runs": len(self.run_ends),
            "max_index": self.last,
        }


def _verify(session: Session, pinned: SM2PublicKey | None) -> tuple[SM2PublicKey, Any]:
    key = pinned if pinned is not None else stored_public_key(session)
    if key is None:
        raise NoSignedHead("the audit log has no entries and no signing key yet")
    try:
        return key, verify_log(session, public_key=key)
    except LedgerError as exc:
        raise LedgerUnverified(
            f"the audit log does not verify, so no report is made from it: {exc}; "
            "run 'secure-fed ledger verify' to locate the fault"
        ) from None


def _scan(session: Session, citer: _Citer, size: int) -> MerkleTree:
    tree = MerkleTree(hasher=SM3_HASHER)
    start = 0
    while start < size:
        rows = session.execute(
            select(AuditEntryRow.entry_index, AuditEntryRow.entry, AuditEntryRow.leaf_hash)
            .where(AuditEntryRow.entry_index >= start, AuditEntryRow.entry_index < size)
            .order_by(AuditEntryRow.entry_index)
            .limit(CHUNK)
        ).all()
        for index, data, leaf in rows:
            tree.append_leaf_hash(leaf)
            citer.scan(index, data)
        start += len(rows)
    return tree


def collect(
    engine: Engine, scope: Scope, *, log_public_key: SM2PublicKey | None = None, spools: Spools
) -> Collected:
    """Verify the log and collect the log-backed part of a report (see module docstring).

    Raises
    ------
    LedgerUnverified
        The audit log fails verification.
    NoSignedHead
        The log has no signed tree head (nothing can be proven).
    """
    with snapshot(engine) as session:
        key, report = _verify(session, log_public_key)
        heads = [
            Head(h.tree_size, h.root_hash, h.body, h.signature)
            for h in session.scalars(select(TreeHeadRow).order_by(TreeHeadRow.seq))
        ]
        state = session.get(LogStateRow, LOG_STATE_ID)
        if not heads or state is None or state.origin is None:
            raise NoSignedHead(
                "the audit log has no signed tree head; run 'secure-fed ledger checkpoint' first"
            )
        newest = heads[-1]
        deriver = Deriver(scope=scope, sink=spools.add)
        citer = _Citer(scope, deriver, spools)
        tree = _scan(session, citer, newest.tree_size)
        cited = citer.finish(newest.tree_size)
        for name, rows in deriver.finish().items():
            for row in rows:
                spools.add(name, row)
        add_tables(session, scope, spools)
        federation = federation_summary(session, scope)
        covering = (cited["max_index"] or 0) + 1
        head = next(h for h in heads if h.tree_size >= covering)
        proofs = {j: inclusion_proof(tree, j, head.tree_size) for j in citer.run_ends}
        return Collected(
            scope=scope,
            spools=spools,
            origin=state.origin,
            log_key=key,
            key_pinned=log_public_key is not None,
            verification=report,
            cited_head=head,
            newest_head=newest,
            proofs=proofs,
            cited=cited,
            consistency=consistency_proof(tree, head.tree_size, newest.tree_size),
            tables={"federation": federation},
        )
