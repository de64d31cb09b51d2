"""Database access shared by the audit log's writer and signer: the lock row and the tree cache.

The writer serializes on the single ``log_state`` row (``SELECT ... FOR
UPDATE`` on PostgreSQL; on SQLite the ledger engine's ``BEGIN IMMEDIATE``
already serializes writers). :class:`TreeCache` keeps the Merkle tree of the
entries already read, re-hashing each newly read entry from its stored bytes
(RFC 9162 leaf hash) and checking the ``prev`` chain, so the log only ever
signs what is actually stored.
"""

from __future__ import annotations

import hmac
import logging

from sqlalchemy import event, select
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from crypto.sm import SM2PublicKey
from privacy_ledger.audit import canonical
from privacy_ledger.audit.merkle import MerkleTree, TreeHasher
from privacy_ledger.audit.models import LOG_STATE_ID, AuditEntryRow, LogStateRow
from privacy_ledger.errors import (
    CanonicalJSONInvalid,
    LogKeyMismatch,
    LogNotInitialized,
    LogTampered,
)

__all__ = [
    "lock_state",
    "claim_state",
    "load_entry",
    "TreeCache",
    "AppendTail",
    "TAIL_KEY",
    "CHUNK",
]

logger = logging.getLogger(__name__)

CHUNK = 5000
GENESIS_PREV = bytes(32)
#: ``session.info`` key of the append tail of the session's current transaction.
TAIL_KEY = "secure_fed.audit.tail"
_WATCHED = "secure_fed.audit.tail_watched"


def _forget_tail(session: Session, _transaction: object) -> None:
    session.info.pop(TAIL_KEY, None)


class AppendTail:
    """Next index and last leaf hash while the caller's transaction holds the log lock.

    The first append of a transaction locks ``log_state``; later appends in
    the same transaction reuse this tail without another round trip. Any end
    of a transaction (commit, rollback, savepoint release or rollback) drops
    it, so the next append reads the state again.
    """

    def __init__(self, session: Session, state: LogStateRow, *, owner: tuple[str, str]) -> None:
        if not session.info.get(_WATCHED):
            event.listen(session, "after_transaction_end", _forget_tail)
            session.info[_WATCHED] = True
        self.transaction = session.get_transaction()
        self.state = state
        self.owner = owner
        self.next_index = state.tree_size
        self.last_leaf = state.last_leaf_hash or GENESIS_PREV

    def advance(self, leaf: bytes) -> None:
        """Record that entry ``next_index`` with ``leaf`` was added."""
        self.next_index += 1
        self.last_leaf = leaf
        self.state.tree_size = self.next_index
        self.state.last_leaf_hash = leaf


def lock_state(session: Session) -> LogStateRow:
    """Load the ``log_state`` row with a row lock (held until the caller's transaction ends).

    Raises
    ------
    LogNotInitialized
        When the audit tables or the state row are missing.
    """
    query = (
        select(LogStateRow)
        .where(LogStateRow.id == LOG_STATE_ID)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    try:
        state = session.scalars(query).first()
    except (OperationalError, ProgrammingError) as exc:
        if "log_state" not in str(exc):
            raise
        raise LogNotInitialized("log_state: table missing; run privacy_ledger.db.upgrade") from None
    if state is None:
        raise LogNotInitialized("log_state: state row missing; run privacy_ledger.db.upgrade")
    return state


def claim_state(state: LogStateRow, *, origin: str, hash_name: str, key: SM2PublicKey) -> None:
    """Record the log's origin and key on first use; later, refuse any other ones.

    Raises
    ------
    LogKeyMismatch
        When the stored log has another origin or signing key.
    """
    fingerprint = key.fingerprint()
    if state.origin is None:
        state.origin = origin
        state.hash_name = hash_name
        state.public_key_pem = key.to_pem()
        state.key_fingerprint = fingerprint
        logger.info("audit log %s opened with key %s", origin, fingerprint)
        return
    if state.origin != origin:
        raise LogKeyMismatch(f"origin: database log is {state.origin!r}, not {origin!r}")
    if state.key_fingerprint != fingerprint:
        raise LogKeyMismatch(
            f"signer: database log is signed by key {state.key_fingerprint}, not {fingerprint}"
        )


def load_entry(session: Session, index: int) -> AuditEntryRow | None:
    """Return the entry row at ``index`` (or ``None``)."""
    return session.get(AuditEntryRow, index)


class TreeCache:
    """Merkle tree of the first ``size`` stored entries, extended incrementally.

    Parameters
    ----------
    hasher
        Leaf/node hasher of the log.
    """

    def __init__(self, hasher: TreeHasher) -> None:
        self.hasher = hasher
        self.tree = MerkleTree(hasher=hasher)

    def _stored_matches(self, session: Session, size: int) -> bool:
        """Whether the database's leaf ``size - 1`` equals the cached one (prefix, by the chain)."""
        if size == 0:
            return True
        stored = session.scalar(
            select(AuditEntryRow.leaf_hash).where(AuditEntryRow.entry_index == size - 1)
        )
        return stored is not None and hmac.compare_digest(stored, self.tree.leaf_hash(size - 1))

    def _rewind(self, session: Session) -> None:
        """Drop cached leaves the database no longer has (rolled back), by binary search.

        Each leaf hashes its predecessor's hash (``prev``), so if leaf ``k - 1``
        matches, the whole prefix of ``k`` leaves does.
        """
        if self._stored_matches(session, self.tree.size):
            return
        good, bad = 0, self.tree.size
        while bad - good > 1:
            middle = (good + bad) // 2
            if self._stored_matches(session, middle):
                good = middle
            else:
                bad = middle
        self.tree.truncate(good)

    def sync(self, session: Session, size: int) -> MerkleTree:
        """Return the tree, extended with stored entries up to at least ``size``.

        Cached leaves that the database no longer has (rolled-back entries)
        are dropped first. Every newly read entry is re-hashed and checked
        against its stored leaf hash, its index and the ``prev`` chain.

        Raises
        ------
        LogTampered
            When a stored entry is missing, altered or out of chain.
        """
        self._rewind(session)
        tree = self.tree
        while tree.size < size:
            start = tree.size
            rows = session.execute(
                select(AuditEntryRow.entry_index, AuditEntryRow.entry, AuditEntryRow.leaf_hash)
                .where(AuditEntryRow.entry_index >= start, AuditEntryRow.entry_index < size)
                .order_by(AuditEntryRow.entry_index)
                .limit(CHUNK)
            ).all()
            if not rows:
                raise LogTampered(f"entry {start} is missing", entry_index=start)
            for index, data, stored in rows:
                self._append_checked(tree, index, data, stored)
        return tree

    def _append_checked(self, tree: MerkleTree, index: int, data: bytes, stored: bytes) -> None:
        expected = tree.size
        if index != expected:
            raise LogTampered(f"entry {expected} is missing", entry_index=expected)
        leaf = self.hasher.hash_leaf(data)
        if not hmac.compare_digest(leaf, stored):
            raise LogTampered(f"entry {index}: bytes do not match its leaf hash", entry_index=index)
        try:
            entry = canonical.decode(data)
            prev = bytes.fromhex(entry["prev"])
            claimed = entry["index"]
        except (CanonicalJSONInvalid, KeyError, TypeError, ValueError):
            raise LogTampered(f"entry {index}: not a valid entry", entry_index=index) from None
        if claimed != index:
            raise LogTampered(f"entry {index}: says it is entry {claimed}", entry_index=index)
        before = tree.leaf_hash(index - 1) if index else GENESIS_PREV
        if not hmac.compare_digest(prev, before):
            raise LogTampered(
                f"entry {index}: prev does not match the hash of entry {index - 1}",
                entry_index=max(index - 1, 0),
            )
        tree.append_leaf_hash(leaf)
