"""One round's scoring backend of the ``shares`` mode (:class:`SharesScoringRound`).

Importable from :mod:`secure_fed.secure.modes.shares`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence

import numpy as np

from crypto.shares import (
    BeaverParty,
    ShareLabel,
    TripleShare,
)
from secure_fed.errors import (
    OpeningRefused,
)
from secure_fed.secure.computation.requests import score_request
from secure_fed.secure.computation.share_ops import (
    centred_difference,
    check_moment_room,
    moment_sums,
    pair_factors,
    score_plan,
    score_sums,
    whiten_shares,
)
from secure_fed.secure.modes.shares_channel import _call, _plan_check, _ShareUpload
from secure_fed.secure.modes.shares_keys import CODEC, SharesKeys
from secure_fed.secure.protocol.vocabulary import HelperOp, Key, Purpose, Step
from secure_fed.secure.release_plan import PlanTracker
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.mahalanobis import (
    symmetric_from_pairs,
)
from secure_fed.wire import (
    encode_array,
)

__all__ = ["SharesScoringRound"]


class SharesScoringRound:
    """One round's scoring backend on shares (``ScoringBackend``); discard after the round.

    Every centre is the hidden mean of a participant set: each party computes
    its share of ``m x_k - sum_j x_j`` locally. The helper derives the row
    counts, the centre and the whitening itself from the round's plan and the
    values opened so far; this side sends only which uploads and which step,
    and runs the same plan state machine (``tracker``) on every opening. Every
    opening is symmetric: the aggregator's share of the output travels with the
    ``finish`` request, so both parties learn the opened value and advance
    their plans on it. Triples are dealt under labels naming ``round_id``.
    """

    def __init__(
        self,
        *,
        keys: SharesKeys,
        shape: tuple[int, int],
        uploads: Mapping[str, _ShareUpload],
        round_id: int,
        tracker: PlanTracker,
    ) -> None:
        self.keys, self.shape, self.uploads = keys, shape, dict(uploads)
        self.round_id, self.tracker = round_id, tracker
        self._prefix = f"r{round_id}-{secrets.token_hex(4)}"
        self._ops = 0

    def _diff(self, pid: str, group: Sequence[str], rows: int) -> np.ndarray:
        others = [self.uploads[p].share[:rows] for p in group]
        return centred_difference(self.uploads[pid].share[:rows], others)

    def _asks(
        self, step: str, ids: Sequence[str], centre: Sequence[str], whiten: np.ndarray
    ) -> list[ReleaseRequest]:
        claim = None if step == Step.RANKING else tuple(tuple(float(x) for x in r) for r in whiten)
        return [
            score_request(
                round_id=self.round_id,
                step=step,
                participant=p,
                roster=ids,
                centre=centre,
                samples=self.tracker.rows(step),
                whitening=claim,
            )
            for p in ids
        ]

    def _beaver(
        self, step: str, x: np.ndarray, y: np.ndarray, head: Mapping[str, object]
    ) -> tuple[np.ndarray, BeaverParty, bytes, str]:
        self._ops += 1
        tensor, op_id = f"{step}-{self._ops}", f"{self._prefix}-op{self._ops}"
        blob_a, blob_h = self.keys.deal(round_id=self.round_id, tensor=tensor, count=x.size)
        label = ShareLabel(round_id=self.round_id, participant_id="beaver", tensor=tensor)
        triples = TripleShare.parse(
            blob_a, key=self.keys.dealer_key, label=label, party=0, seeded=True, count=x.size
        )
        party = BeaverParty(triples=triples, channel_key=self.keys.channel_key)
        mine = party.open(x, y)
        request: dict[str, object] = {Key.OP: HelperOp.OPEN, Key.KIND: step, Key.OP_ID: op_id}
        request.update({"tensor": tensor, **head, "round_id": self.round_id})
        reply, theirs = _call(self.keys, request, blob_h, round_id=self.round_id)
        self._expect(reply, step, op_id)
        return party.finish(theirs), party, mine, op_id  # type: ignore[arg-type]

    def _finish(self, step: str, op_id: str, opening: bytes, sums: np.ndarray) -> np.ndarray:
        meta, raw = encode_array(sums, "u8")
        head: dict[str, object] = {
            Key.OP: HelperOp.FINISH,
            Key.OP_ID: op_id,
            Key.ROUND_ID: self.round_id,
            Key.ARRAY: meta,
        }
        reply, other = _call(self.keys, head, opening, raw, round_id=self.round_id)
        self._expect(reply, step, op_id)
        return sums + np.asarray(other, dtype=np.uint64)

    def _expect(self, reply: dict[str, object], step: str, op_id: str) -> None:
        """Refuse a helper reply that does not answer this step of this round's plan."""
        if reply.get("op_id") != op_id or reply.get("step") != step:
            raise OpeningRefused(f"helper reply does not match {step} operation {op_id}")
        if reply.get("round_id") != self.round_id:
            raise OpeningRefused(f"helper reply names another round than {self.round_id}")

    def ranking_scores(self, ids: Sequence[str], samples: int) -> dict[str, float]:
        """Open ``mean_{i<S} ||x_k - p̄_i||^2`` per id, ``p̄`` the hidden mean of ``ids``."""
        return self._scores(Step.RANKING, ids, ids, np.eye(self.shape[1]), samples)

    def final_scores(
        self, ids: Sequence[str], subset: Sequence[str], whiten: np.ndarray
    ) -> dict[str, float]:
        """Open ``mean_i ||W (x_k - p̄H_i)||^2`` per id, ``p̄H`` the hidden mean of ``subset``."""
        return self._scores(Step.FINAL, ids, subset, whiten, self.shape[0])

    def _scores(
        self, step: str, ids: Sequence[str], centre: Sequence[str], whiten: np.ndarray, rows: int
    ) -> dict[str, float]:
        asks = self._asks(step, ids, centre, whiten)
        for ask in asks:
            _plan_check(self.tracker, ask)
        m = len(centre)
        plan = score_plan(np.asarray(whiten) / m, n_samples=rows, input_scale=m)
        z = np.concatenate(
            [whiten_shares(self._diff(p, centre, rows), plan, party=0).reshape(-1) for p in ids]
        )
        head = {"uids": self._uids(ids), "centre": self._uids(centre)}
        product, _, mine, op_id = self._beaver(step, z, z, head)
        total = self._finish(step, op_id, mine, score_sums(product, count=len(ids)))
        sums = CODEC.decode(total, frac_bits=2 * plan.fz)
        out = {p: float(s) / rows for p, s in zip(ids, sums, strict=True)}
        for ask in asks:
            self.tracker.record(ask, np.array([out[ask.contributors[0]]]))
        return out

    def _uids(self, ids: Sequence[str]) -> list[str]:
        return [self.uploads[p].uid for p in ids]

    def moments(self, subset: Sequence[str], samples: int) -> np.ndarray:
        """Open the second moment of ``subset`` centred on its hidden mean (Beaver products)."""
        h, c = len(subset), self.shape[1]
        ask = ReleaseRequest(
            round_id=self.round_id,
            purpose=Purpose.MOMENTS,
            contributors=tuple(subset),
            value_kind="aggregate",
            shape=(c, c),
            centre=tuple(subset),
            samples=samples,
        )
        _plan_check(self.tracker, ask)
        check_moment_room(h, samples)
        x, y = pair_factors([self._diff(p, subset, samples) for p in subset])
        head = {"uids": self._uids(subset), "centre": self._uids(subset)}
        product, _, mine, op_id = self._beaver(Step.MOMENTS, x, y, head)
        pairs = c * (c + 1) // 2
        sums = moment_sums(product, count=h, pairs=pairs, samples=samples)
        total = self._finish(Step.MOMENTS, op_id, mine, sums)
        flat = CODEC.decode(total, frac_bits=2 * CODEC.frac_bits) / float(h * h)
        moment = symmetric_from_pairs(flat, c)
        self.tracker.record(ask, moment)
        return moment
