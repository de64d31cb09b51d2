"""Checks of the cited entries of a bundle: canonical bytes, hash chain, runs and proofs.

Cited entries come in increasing index order. Consecutive entries are linked
by ``prev`` (the SM3 leaf hash of the entry before), so a run of consecutive
entries is authenticated by one RFC 9162 inclusion proof of its last entry
against the cited signed head; every run ends with an entry carrying a proof.
For a federation-wide report the entries must also cover the claimed index
range completely, with a boundary entry on each side outside the period.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from compliance.bundle import unb64
from compliance.errors import (
    BundleChainBroken,
    BundleFailure,
    BundleInvalid,
    BundleMalformed,
    BundleProofInvalid,
    BundleScopeViolated,
)
from compliance.scope import Scope
from privacy_ledger.audit import canonical
from privacy_ledger.audit.merkle import SM3_HASHER
from privacy_ledger.audit.proofs import verify_inclusion
from privacy_ledger.errors import CanonicalJSONInvalid, LedgerError

__all__ = ["EntryChecks"]

_KEYS = ("event", "fields", "index", "prev", "sensitive", "subject", "time", "v")
Fail = Callable[[type[BundleInvalid], str], None]


def _parse(data: bytes, index: int) -> dict[str, Any] | None:
    try:
        entry = canonical.decode(data)
    except CanonicalJSONInvalid:
        return None
    if not isinstance(entry, dict) or tuple(sorted(entry)) != _KEYS:
        return None
    if entry["index"] != index or not all(
        isinstance(entry[k], str) for k in ("event", "subject", "time", "prev")
    ):
        return None
    return entry


class EntryChecks:
    """Streaming checks of the ``entries`` array.

    Parameters
    ----------
    head
        ``(tree size, root hash)`` of the cited signed head (``None`` if it failed).
    scope
        The report's scope (for the range boundaries).
    cited_range
        ``{"first": a, "end": b}`` for a complete federation-wide report, else ``None``.
    fail
        Records one failed check.
    """

    def __init__(
        self,
        *,
        head: tuple[int, bytes] | None,
        scope: Scope,
        cited_range: dict[str, int] | None,
        fail: Fail,
    ) -> None:
        self.head, self.scope, self.range, self.fail = head, scope, cited_range, fail
        self.count = 0
        self.runs = 0
        self.in_range = 0
        self.times: dict[int, str] = {}
        self._last: tuple[int, bytes, bool] | None = None

    def feed(self, value: object) -> tuple[int, dict[str, Any]] | None:
        """Check one cited entry; return ``(index, entry)`` if its bytes parse."""
        if (
            not isinstance(value, dict)
            or set(value) - {"entry", "index", "proof"}
            or not {"entry", "index"} <= set(value)
            or not isinstance(value["index"], int)
        ):
            raise BundleMalformed(
                [
                    BundleFailure.of(
                        BundleMalformed,
                        f"entries[{self.count}]: want entry, index and optional proof",
                    )
                ]
            )
        index, data = value["index"], unb64(value["entry"], f"entries[{self.count}].entry")
        self.count += 1
        leaf = SM3_HASHER.hash_leaf(data)
        entry = _parse(data, index)
        self._link(index, entry)
        proof = value.get("proof")
        if proof is not None:
            self._prove(index, leaf, proof)
        self._last = (index, leaf, proof is not None)
        if entry is None:
            self.fail(
                BundleChainBroken, f"entry {index}: not a canonical audit entry with its own index"
            )
            return None
        self._track_range(index, entry["time"])
        return index, entry

    def _link(self, index: int, entry: dict[str, Any] | None) -> None:
        last = self._last
        if last is None:
            return
        if index <= last[0]:
            self.fail(
                BundleChainBroken, f"entry {index}: indexes must increase (follows {last[0]})"
            )
        elif index == last[0] + 1:
            if entry is not None and not hmac.compare_digest(entry["prev"], last[1].hex()):
                self.fail(
                    BundleChainBroken, f"entry {index}: prev is not the hash of entry {last[0]}"
                )
        elif not last[2]:
            self.fail(BundleProofInvalid, f"entry {last[0]}: ends a run but has no proof")

    def _prove(self, index: int, leaf: bytes, proof: object) -> None:
        self.runs += 1
        if not isinstance(proof, list):
            self.fail(BundleProofInvalid, f"entry {index}: proof is not a list")
            return
        nodes = [unb64(node, f"entry {index} proof[{i}]") for i, node in enumerate(proof)]
        if self.head is None:
            return
        size, root = self.head
        try:
            verify_inclusion(SM3_HASHER, index, size, leaf, nodes, root)
        except LedgerError as exc:
            self.fail(
                BundleProofInvalid,
                f"entry {index}: inclusion proof against the cited "
                f"head of size {size} fails ({exc})",
            )

    def _track_range(self, index: int, time: str) -> None:
        if self.range is None:
            return
        first, end = self.range["first"], self.range["end"]
        if first <= index < end:
            self.in_range += 1
        if index in (first - 1, first, end):
            self.times[index] = time

    def finish(self) -> None:
        """Check the last run's proof and the completeness of the claimed range."""
        if self._last is not None and not self._last[2]:
            self.fail(BundleProofInvalid, f"entry {self._last[0]}: ends a run but has no proof")
        if self.range is not None:
            self._check_range()

    def _check_range(self) -> None:
        first, end = self.range["first"], self.range["end"]  # type: ignore[index]
        start, stop = self.scope.start, self.scope.end
        if self.in_range != end - first:
            self.fail(
                BundleScopeViolated,
                f"range [{first}, {end}): {self.in_range} of "
                f"{end - first} entries cited (some left out)",
            )
        if first > 0 and not (
            first - 1 in self.times and start is not None and self.times[first - 1] < start
        ):
            self.fail(
                BundleScopeViolated,
                f"entry {first - 1} (before the range) is not cited with a time before the period",
            )
        if first < end and start is not None and self.times.get(first, "") < start:
            self.fail(
                BundleScopeViolated, f"entry {first} starts the range but is before the period"
            )
        size = self.head[0] if self.head is not None else end
        if end < size and not (end in self.times and stop is not None and self.times[end] >= stop):
            self.fail(
                BundleScopeViolated,
                f"entry {end} (after the range) is not cited with "
                "a time at or after the end of the period",
            )
        if end > size:
            self.fail(BundleScopeViolated, f"range end {end} is beyond the cited head ({size})")
