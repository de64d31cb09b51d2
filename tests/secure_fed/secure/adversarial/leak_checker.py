"""Test-only leak checker: every opened value of a round as a function of the uploads.

It reads a gatekeeper's release log (the key authority's in ckks mode, the
helper's in shares mode: what was actually released, not what the aggregator
intended) and models each released value:

* ``aggregate`` / ``mean``: a LINEAR function ``sum_k w_k X_k`` (the log row's
  weights; equal weights when the row has none), one coefficient per participant;
* ``moments``: a second-order function of the participants it covers;
* ``score``: a second-order scalar of one participant (averaged over samples).

:meth:`LeakChecker.check` asserts what the release plan promises: the span of
the opened linear combinations contains no non-zero vector supported on fewer
than ``min_participants`` participants (checked by enumerating every such
subset ``T``: the span holds a vector supported on ``T`` iff removing the
columns of ``T`` lowers its rank), and all second-order releases of a round
cover one and the same participant set.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from secure_fed.secure.release_policy import DecryptionRecord

LINEAR = ("aggregate", "mean")


@dataclass(frozen=True)
class Opening:
    """One released value, as a function of the uploads."""

    round_id: int
    purpose: str
    degree: int
    weights: tuple[tuple[str, float], ...]

    @property
    def support(self) -> frozenset[str]:
        return frozenset(p for p, w in self.weights if w != 0)


def openings(log: Iterable[DecryptionRecord]) -> list[Opening]:
    """The released rows of a gatekeeper log, modelled (refusals and triple deals skipped)."""
    out = []
    for row in log:
        if not row.released or row.purpose.startswith("triples:"):
            continue
        ids = row.participant_ids
        if row.purpose in LINEAR:
            weights = row.weights or tuple(1.0 / len(ids) for _ in ids)
            out.append(Opening(row.round_id, row.purpose, 1, tuple(zip(ids, weights, strict=True))))
        else:
            out.append(Opening(row.round_id, row.purpose, 2, tuple((p, 1.0) for p in ids)))
    return out


@dataclass
class LeakChecker:
    """Assert the release plan's guarantees over recorded openings."""

    min_participants: int

    def small_supports(
        self, found: Sequence[Opening], participants: Sequence[str]
    ) -> list[tuple[str, ...]]:
        """Subsets ``T`` (``|T| < min``) some opened linear combination is supported on."""
        ids = sorted(participants)
        rows = [dict(o.weights) for o in found if o.degree == 1]
        if not rows:
            return []
        v = np.array([[r.get(p, 0.0) for p in ids] for r in rows])
        full = np.linalg.matrix_rank(v)
        leaks = []
        for size in range(1, min(self.min_participants, len(ids) + 1)):
            for subset in itertools.combinations(range(len(ids)), size):
                rest = [j for j in range(len(ids)) if j not in subset]
                rank = np.linalg.matrix_rank(v[:, rest]) if rest else 0
                if rank < full:
                    leaks.append(tuple(ids[j] for j in subset))
        return leaks

    def second_order_sets(self, found: Sequence[Opening]) -> dict[int, set[frozenset[str]]]:
        """Per round, the participant sets its second-order (moment) releases cover."""
        out: dict[int, set[frozenset[str]]] = defaultdict(set)
        for o in found:
            if o.purpose == "moments":
                out[o.round_id].add(o.support)
        return out

    def check(self, found: Sequence[Opening], participants: Sequence[str]) -> None:
        """Raise ``AssertionError`` naming the leak, if any."""
        by_round: dict[int, list[Opening]] = defaultdict(list)
        for o in found:
            by_round[o.round_id].append(o)
        for round_id, items in by_round.items():
            leaks = self.small_supports(items, participants)
            assert not leaks, f"round {round_id}: opened linear span isolates {leaks[:5]}"
        for round_id, sets in self.second_order_sets(found).items():
            assert len(sets) <= 1, f"round {round_id}: second-order releases over {sets}"
