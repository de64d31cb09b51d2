"""Signed-head checks of audit-log verification (C2SP checkpoints, RFC 9162 consistency).

:func:`check_heads` validates every stored head on its own (SM2 signature,
columns, numbering, order, agreement with ``log_state``); :class:`HeadWalker`
compares each head with the tree recomputed from the entries and proves
consecutive heads consistent; :func:`check_trusted` checks a head accepted
earlier against the recomputed tree.
"""

from __future__ import annotations

import hmac

from crypto.sm import SM2PublicKey
from privacy_ledger.audit.checkpoint import Checkpoint, verify_head
from privacy_ledger.audit.merkle import MerkleTree
from privacy_ledger.audit.models import LogStateRow, TreeHeadRow
from privacy_ledger.audit.proofs import consistency_proof, verify_consistency
from privacy_ledger.errors import (
    HeadsInconsistent,
    HeadTampered,
    LedgerError,
    LogKeyMismatch,
    LogTampered,
    ProofInvalid,
)

__all__ = ["check_heads", "HeadWalker", "check_trusted"]


def check_heads(
    rows: list[TreeHeadRow], state: LogStateRow, public_key: SM2PublicKey
) -> list[Checkpoint]:
    """Validate the stored heads (in ``seq`` order) and return their checkpoints.

    Raises
    ------
    HeadTampered
        A head fails its signature, differs from its columns, is missing, or
        disagrees with ``log_state``.
    HeadsInconsistent
        Head sizes do not increase in signing order.
    """
    heads: list[Checkpoint] = []
    for expected_seq, row in enumerate(rows, start=1):
        if row.seq != expected_seq:
            raise HeadTampered(
                f"signed head #{expected_seq} is missing (next stored: size {row.tree_size})",
                tree_size=row.tree_size,
            )
        columns = (row.body, row.signature, row.root_hash)
        if not all(isinstance(c, bytes | memoryview) for c in columns):
            raise HeadTampered(
                f"signed head #{row.seq}: a column holds a value of the wrong type (altered)",
                tree_size=row.tree_size,
            )
        try:
            cp = verify_head(row.body, row.signature, public_key, origin=state.origin)
        except LedgerError as exc:
            raise HeadTampered(
                f"signed head #{row.seq} (size {row.tree_size}) is invalid: {exc}",
                tree_size=row.tree_size,
            ) from None
        if cp.tree_size != row.tree_size or not hmac.compare_digest(cp.root_hash, row.root_hash):
            raise HeadTampered(
                f"signed head #{row.seq} (size {cp.tree_size}): stored size/root differ from "
                "its signed body",
                tree_size=cp.tree_size,
            )
        if heads and cp.tree_size <= heads[-1].tree_size:
            raise HeadsInconsistent(
                f"signed head #{row.seq} has size {cp.tree_size} after a head of size "
                f"{heads[-1].tree_size}",
                tree_size=cp.tree_size,
            )
        heads.append(cp)
    newest = heads[-1].tree_size if heads else 0
    if newest != state.last_head_size:
        raise HeadTampered(
            f"log_state says the newest head has size {state.last_head_size}, stored: {newest}",
            tree_size=state.last_head_size,
        )
    if len(heads) != state.head_count:
        raise HeadTampered(
            f"log_state counts {state.head_count} signed heads, {len(heads)} are stored",
            tree_size=newest,
        )
    return heads


class HeadWalker:
    """Compares each head with the recomputed tree once the tree reaches its size.

    Parameters
    ----------
    heads
        Validated heads in increasing size.
    """

    def __init__(self, heads: list[Checkpoint]) -> None:
        self._heads = heads
        self._next = 0
        self._previous: Checkpoint | None = None

    def check_upto(self, tree: MerkleTree, size: int) -> None:
        """Check every head of size <= ``size`` not checked yet (raises :class:`LogTampered`)."""
        while self._next < len(self._heads) and self._heads[self._next].tree_size <= size:
            head = self._heads[self._next]
            if not hmac.compare_digest(tree.root(head.tree_size), head.root_hash):
                start = self._previous.tree_size if self._previous else 0
                raise LogTampered(
                    f"entries [{start}, {head.tree_size}) do not match the signed head of size "
                    f"{head.tree_size}; first entry that may be altered: {start}",
                    entry_index=start,
                    tree_size=head.tree_size,
                )
            if self._previous is not None:
                self._check_consistent(tree, self._previous, head)
            self._previous = head
            self._next += 1

    @staticmethod
    def _check_consistent(tree: MerkleTree, old: Checkpoint, new: Checkpoint) -> None:
        try:
            proof = consistency_proof(tree, old.tree_size, new.tree_size)
            verify_consistency(
                tree.hasher, old.tree_size, new.tree_size, proof, old.root_hash, new.root_hash
            )
        except ProofInvalid as exc:
            raise HeadsInconsistent(
                f"heads of size {old.tree_size} and {new.tree_size} are inconsistent: {exc}",
                tree_size=new.tree_size,
            ) from None

    def finish(self, size: int) -> None:
        """Raise :class:`LogTampered` if a head covers more than the ``size`` stored entries."""
        if self._next < len(self._heads):
            head = self._heads[self._next]
            raise LogTampered(
                f"signed head of size {head.tree_size} covers entries the log lacks "
                f"(only {size} stored); entry {size} is missing",
                entry_index=size,
                tree_size=head.tree_size,
            )


def check_trusted(tree: MerkleTree, origin: str | None, trusted: Checkpoint) -> None:
    """Check that the recomputed tree contains the head ``trusted`` accepted earlier.

    Raises
    ------
    LogTampered
        When entries under the trusted head were removed.
    HeadsInconsistent
        When the history under it differs (rewritten and re-signed).
    LogKeyMismatch
        When the head belongs to another log.
    """
    if origin is not None and trusted.origin != origin:
        raise LogKeyMismatch(f"trusted: head is for {trusted.origin!r}, the log is {origin!r}")
    if trusted.tree_size > tree.size:
        raise LogTampered(
            f"the log has {tree.size} entries but a head of size {trusted.tree_size} was "
            f"accepted earlier: entries from {tree.size} on were removed",
            entry_index=tree.size,
            tree_size=trusted.tree_size,
        )
    if not hmac.compare_digest(tree.root(trusted.tree_size), trusted.root_hash):
        raise HeadsInconsistent(
            f"the first {trusted.tree_size} entries differ from the head accepted earlier "
            "(history rewritten and re-signed)",
            tree_size=trusted.tree_size,
        )
