"""Signing tree heads without ever signing two inconsistent ones (RFC 9162 section 2.1.4).

Before a new head is signed, the tree recomputed from the stored entries
must extend every head the signer knows: the newest head stored in the
database (whose signature and columns are checked first) and the newest head
this process itself signed and saw committed. Otherwise signing is refused
with :class:`~privacy_ledger.errors.HeadSigningRefused`.
"""

from __future__ import annotations

import logging

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey
from privacy_ledger.audit.checkpoint import Checkpoint, SignedTreeHead, sign_checkpoint, verify_head
from privacy_ledger.audit.merkle import MerkleTree, TreeHasher
from privacy_ledger.audit.models import LogStateRow, TreeHeadRow
from privacy_ledger.audit.proofs import consistency_proof, verify_consistency
from privacy_ledger.audit.store import TreeCache
from privacy_ledger.errors import HeadSigningRefused, LedgerError, LogTampered, ProofInvalid

__all__ = ["HeadSigner"]

logger = logging.getLogger(__name__)

_PENDING = "secure_fed.audit.pending_heads"
_LISTENING = "secure_fed.audit.head_listeners"


class HeadSigner:
    """Signs checkpoints for one log after the consistency checks.

    Parameters
    ----------
    signer
        The log's SM2 key.
    origin
        The log's origin line.
    hasher
        Tree hasher.
    cache
        Shared tree cache of the log.
    """

    def __init__(
        self, *, signer: SM2PrivateKey, origin: str, hasher: TreeHasher, cache: TreeCache
    ) -> None:
        self._key = signer
        self._origin = origin
        self._hasher = hasher
        self._cache = cache
        self._confirmed: tuple[int, bytes] | None = None

    def __repr__(self) -> str:
        return f"HeadSigner(origin={self._origin!r})"

    def _known_heads(self, session: Session, state: LogStateRow) -> list[tuple[int, bytes]]:
        newest = select(TreeHeadRow).order_by(TreeHeadRow.seq.desc()).limit(1)
        last = session.scalars(newest).first()
        if last is None:
            if state.head_count:
                raise HeadSigningRefused(f"log_state counts {state.head_count} heads; none stored")
            known = []
        else:
            if last.seq != state.head_count:
                raise HeadSigningRefused(
                    f"newest stored head is #{last.seq}, log_state counts {state.head_count}"
                )
            try:
                cp = verify_head(
                    last.body, last.signature, self._key.public_key, origin=self._origin
                )
            except LedgerError as exc:
                raise HeadSigningRefused(f"newest stored head is invalid: {exc}") from None
            if cp.tree_size != last.tree_size or cp.root_hash != last.root_hash:
                raise HeadSigningRefused(f"head #{last.seq}: columns differ from its signed body")
            known = [(cp.tree_size, cp.root_hash)]
        if self._confirmed is not None:
            known.append(self._confirmed)
        return known

    def _check_extends(
        self, tree: MerkleTree, size: int, root: bytes, old: tuple[int, bytes]
    ) -> None:
        old_size, old_root = old
        if old_size > size:
            raise HeadSigningRefused(
                f"log has {size} entries but a head of size {old_size} was signed (log shrank)"
            )
        try:
            proof = consistency_proof(tree, old_size, size)
            verify_consistency(self._hasher, old_size, size, proof, old_root, root)
        except ProofInvalid as exc:
            raise HeadSigningRefused(
                f"entries do not extend the signed head of size {old_size}: {exc}"
            ) from None

    def sign(self, session: Session, state: LogStateRow, now: float) -> SignedTreeHead:
        """Sign the head of the ``state.tree_size`` stored entries; add it to ``session``.

        Raises
        ------
        HeadSigningRefused
            When the stored entries are altered or do not extend a known head.
        """
        size = state.tree_size
        try:
            tree = self._cache.sync(session, size)
        except LogTampered as exc:
            raise HeadSigningRefused(f"stored entries fail their checks: {exc}") from None
        root = tree.root(size)
        for old in self._known_heads(session, state):
            self._check_extends(tree, size, root, old)
        head = sign_checkpoint(
            Checkpoint(origin=self._origin, tree_size=size, root_hash=root), self._key
        )
        state.head_count += 1
        session.add(
            TreeHeadRow(
                seq=state.head_count,
                tree_size=size,
                root_hash=root,
                body=head.body,
                signature=head.signature,
                key_fingerprint=head.key_fingerprint,
                signed_at=now,
            )
        )
        state.last_head_size = size
        state.last_head_at = now
        self._remember_after_commit(session, (size, root))
        logger.info("signed head %s size %d", self._origin, size)
        return head

    def _remember_after_commit(self, session: Session, head: tuple[int, bytes]) -> None:
        listening = session.info.setdefault(_LISTENING, set())
        if id(self) not in listening:
            event.listen(session, "after_commit", self._on_commit)
            event.listen(session, "after_rollback", self._on_rollback)
            listening.add(id(self))
        session.info.setdefault(_PENDING, {})[id(self)] = head

    def _on_commit(self, session: Session) -> None:
        head = session.info.get(_PENDING, {}).pop(id(self), None)
        if head is not None and (self._confirmed is None or head[0] >= self._confirmed[0]):
            self._confirmed = head

    def _on_rollback(self, session: Session) -> None:
        session.info.get(_PENDING, {}).pop(id(self), None)
