"""Entry-by-entry checks of the audit log, locating the first bad entry.

Each entry records ``prev``, the SM3 leaf hash of the entry before it, so
the stored sequence is a hash chain alongside the Merkle tree. When a row is
altered, removed, inserted or moved, the chain and the entry's own fields
tell *which* position first deviates:

* own checks fail (bytes vs stored leaf hash, canonical JSON, the entry's own
  ``index``, ``event`` / ``subject`` columns): that entry;
* gap in the stored indexes: the missing index;
* entry ``j`` links to entry ``j - 2``: if ``j`` also sits one place off its own
  ``index``, entry ``j - 1`` was inserted (rows shifted); otherwise ``j`` is a
  forged or duplicated entry;
* the link into ``j`` is broken but ``j`` itself is intact: look one entry
  further. If ``j + 1`` links correctly to ``j``, entry ``j - 1`` was altered
  (its hash changed, rewritten leaf hash included); if not, ``j`` itself was
  replaced.

An alteration of the very last entry with a recomputed leaf hash leaves no
successor to contradict it; only a signed head covering it reveals it (and
then only the range since the previous head).
"""

from __future__ import annotations

import hmac
from typing import Any, NoReturn

from privacy_ledger.audit import canonical
from privacy_ledger.audit.merkle import MerkleTree
from privacy_ledger.audit.store import GENESIS_PREV
from privacy_ledger.errors import CanonicalJSONInvalid, LogTampered

__all__ = ["EntryChecker"]

_FIELDS = ("event", "fields", "index", "prev", "sensitive", "subject", "time", "v")


def _fault(index: int, reason: str) -> NoReturn:
    raise LogTampered(f"entry {index}: {reason}", entry_index=index)


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        entry = canonical.decode(data)
    except CanonicalJSONInvalid:
        return None
    if not isinstance(entry, dict) or tuple(sorted(entry)) != _FIELDS:
        return None
    return entry


def _well_typed(event: object, subject: object, data: object, leaf: object) -> bool:
    """SQLite keeps any value in any column: reject what the schema's types exclude."""
    texts = isinstance(event, str) and isinstance(subject, str)
    return texts and isinstance(data, bytes | memoryview) and isinstance(leaf, bytes | memoryview)


def _prev_of(entry: dict[str, Any] | None) -> bytes | None:
    if entry is None or not isinstance(entry["prev"], str) or len(entry["prev"]) != 64:
        return None
    try:
        return bytes.fromhex(entry["prev"])
    except ValueError:
        return None


class EntryChecker:
    """Feeds stored entries in index order into ``tree``, raising at the first bad one.

    Parameters
    ----------
    tree
        Empty Merkle tree that receives the recomputed leaf hashes.
    """

    def __init__(self, tree: MerkleTree) -> None:
        self.tree = tree
        self._pending: int | None = None

    @property
    def settled(self) -> int:
        """Number of leading entries known to be good."""
        if self._pending is None:
            return self.tree.size
        return max(self._pending - 1, 0)

    def _resolve_single_break(self) -> None:
        if self._pending is not None:
            p = self._pending
            bad = max(p - 1, 0)
            _fault(bad, f"its hash differs from the one entry {p} recorded (altered)")

    def _own_problem(
        self, index: int, event: str, subject: str, leaf: bytes, stored: bytes, entry: Any
    ) -> str | None:
        if not hmac.compare_digest(leaf, stored):
            return "stored bytes do not match the stored leaf hash (altered)"
        if entry is None:
            return "not a canonical audit entry"
        if entry["index"] != index:
            return f"stored at index {index} but says it is entry {entry['index']} (moved)"
        if entry["event"] != event or entry["subject"] != subject:
            return "event/subject columns differ from the hashed entry (altered)"
        return None

    def feed(self, index: int, event: str, subject: str, data: bytes, stored_leaf: bytes) -> None:
        """Check the next stored row.

        Raises
        ------
        LogTampered
            Naming the first bad entry as soon as it can be located.
        """
        tree = self.tree
        expected = tree.size
        if index != expected:
            self._resolve_single_break()
            _fault(expected, f"missing (the next stored entry is {index}; deleted)")
        if not _well_typed(event, subject, data, stored_leaf):
            self._resolve_single_break()
            _fault(index, "a column holds a value of the wrong type (altered)")
        leaf = tree.hasher.hash_leaf(data)
        entry = _parse(data)
        prev = _prev_of(entry)
        before = tree.leaf_hash(index - 1) if index else GENESIS_PREV
        link_ok = prev is not None and hmac.compare_digest(prev, before)
        if self._pending is not None:
            p = self._pending
            if link_ok:
                self._resolve_single_break()
            _fault(p, "altered or replaced (the chain is broken on both sides)")
        problem = self._own_problem(index, event, subject, leaf, stored_leaf, entry)
        if not link_ok and prev is not None and index >= 2:
            if hmac.compare_digest(prev, tree.leaf_hash(index - 2)):
                if problem is not None:  # shifted by one: the row before it was slipped in
                    _fault(index - 1, f"inserted (entry {index} directly follows {index - 2})")
                _fault(index, f"forged or duplicated: it links to entry {index - 2}")
        if problem is not None:
            _fault(index, problem)
        if not link_ok:
            self._pending = index
        tree.append_leaf_hash(leaf)

    def finish(self) -> None:
        """Resolve a chain break found at the last entry (raises if there is one)."""
        self._resolve_single_break()
