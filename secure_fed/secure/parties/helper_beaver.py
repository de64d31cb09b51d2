"""The helper's Beaver products: the second moment and the scoring passes.

:class:`BeaverMachine` is the part of
:class:`~secure_fed.secure.parties.helper.HelperParty` that serves the plan's
Beaver openings (op ``open``, then ``finish``): the helper derives every factor
from its own view (its shares of the plan's rows, its share of the hidden
centre ``m x_k - sum_j x_j``, the whitening from the covariance it helped open),
uses each triple label once, and opens the product only as the release policy
allows. It builds on
:class:`~secure_fed.secure.parties.helper_openings.OpeningsMachine` (the
policy's view of an opening and the helper's shares of the named uploads).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import (
    BeaverParty,
    ShareLabel,
    TripleShare,
)
from crypto.shares.wire import open_sealed
from secure_fed.errors import AuthorityRequestMalformed
from secure_fed.secure.computation.share_ops import (
    CODEC,
    centred_difference,
    check_moment_room,
    moment_sums,
    pair_factors,
    score_plan,
    score_sums,
    whiten_shares,
)
from secure_fed.secure.parties.helper_copies import Reply
from secure_fed.secure.parties.helper_openings import OpeningsMachine
from secure_fed.secure.protocol.helper_requests import DistanceAsk
from secure_fed.secure.protocol.helper_step_requests import FinishRequest, OpenRequest
from secure_fed.secure.protocol.vocabulary import Key, Purpose, Step
from secure_fed.secure.release_plan import PlanTracker
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.mahalanobis import symmetric_from_pairs
from secure_fed.wire import encode_array

__all__ = ["BeaverMachine"]


@dataclass
class _Pending:
    party: BeaverParty
    asks: list[ReleaseRequest]
    kind: str
    rows: int
    fz: int


class BeaverMachine(OpeningsMachine):
    """The Beaver products of the helper (a base of ``HelperParty``, which holds the state).

    The attribute below is the helper's field this part reads and writes.
    """

    _pending: dict[str, _Pending]

    def _open(self, request: OpenRequest | DistanceAsk) -> Reply:
        if isinstance(request, DistanceAsk):
            self._refuse_distance(request)
            raise AssertionError  # unreachable: the refusal raises
        kind, op_id, round_id = request.kind, request.op_id, request.round_id
        uids, shares = self._shares(request.uids)
        centre_uids, centre = self._shares(request.centre)
        asks = self._beaver_asks(kind, uids, centre_uids, round_id)
        if request.carried:
            self.policy.refuse(
                asks[0], f"the helper derives {list(request.carried)} itself; the request set them"
            )
        for ask in asks:
            self.policy.check(ask)
        self._bind(asks[0], sorted({*uids, *centre_uids}))
        triples, tensor = request.triples(), request.triple_label()
        tracker = self._tracker(asks[0])
        if kind == Step.MOMENTS:
            rows, fz = tracker.rows(Step.MOMENTS), CODEC.frac_bits
            check_moment_room(len(centre), rows)
            x, y = pair_factors(
                [centred_difference(s[:rows], [c[:rows] for c in centre]) for s in shares]
            )
        else:
            x, rows, fz = self._score_factors(tracker, kind, shares, centre)
            y = x
        party, message = self._beaver(asks[0], tensor, x, y, triples)
        self._pending[op_id] = _Pending(party, asks, kind, rows, fz)
        return {Key.OP_ID: op_id, Key.STEP: kind, Key.ROUND_ID: round_id}, message

    def _beaver_asks(
        self, kind: str, uids: list[str], centre: list[str], round_id: int
    ) -> list[ReleaseRequest]:
        """Build the policy's view of a Beaver opening, every input from the helper's view."""
        tracker = self.plans.tracker(round_id)
        rows = tracker.rows(kind) if tracker is not None else None
        if kind == Step.MOMENTS:
            c = self.shape[1]
            ask = self._ask(
                Purpose.MOMENTS, uids, round_id, centre=self._pids(centre), samples=rows
            )
            return [replace(ask, shape=(c, c))]
        claim = (
            tracker.whitening_claim(kind) if tracker is not None and kind == Step.FINAL else None
        )
        return [
            self._ask(
                Purpose.SCORE,
                [u],
                round_id,
                step=kind,
                roster=self._pids(uids),
                centre=self._pids(centre),
                samples=rows,
                whitening=claim,
            )
            for u in uids
        ]

    def _score_factors(
        self, tracker: PlanTracker, kind: str, shares: list[np.ndarray], centre: list[np.ndarray]
    ) -> tuple[np.ndarray, int, int]:
        """``z = (W / m)(m x_k - sum_j x_j)``: W, rows and m from the plan and opened values."""
        rows, m = tracker.rows(kind), len(centre)
        whiten = np.eye(self.shape[1]) if kind == Step.RANKING else tracker.whiten
        assert whiten is not None  # the plan check ensured the covariance was opened
        plan = score_plan(np.asarray(whiten) / m, n_samples=rows, input_scale=m)
        group = [c[:rows] for c in centre]
        z = [whiten_shares(centred_difference(s[:rows], group), plan, party=1) for s in shares]
        return np.concatenate([v.reshape(-1) for v in z]), rows, plan.fz

    def _beaver(
        self, ask: ReleaseRequest, tensor: str, x: np.ndarray, y: np.ndarray, triples: bytes
    ) -> tuple[BeaverParty, bytes]:
        if not self.registry.claim_triple(ask.round_id, tensor):
            self.policy.refuse(ask, f"Beaver triple label {tensor!r} was already used")
        label = ShareLabel(round_id=ask.round_id, participant_id="beaver", tensor=tensor)
        try:
            triple = TripleShare.parse(
                open_sealed(self.dealer_key, triples),
                key=self.dealer_key,
                label=label,
                party=1,
                count=x.size,
            )
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"triples refused: {exc}") from exc
        party = BeaverParty(triples=triple, channel_key=self.channel_key)
        return party, party.open(x, y)

    def _finish(self, request: FinishRequest) -> Reply:
        op_id, round_id = request.op_id, request.round_id
        pending = self._pending.get(op_id)
        if pending is None:
            raise AuthorityRequestMalformed(f"no open Beaver operation {op_id!r}")
        if pending.asks[0].round_id != round_id:
            raise AuthorityRequestMalformed(f"operation {op_id!r} belongs to another round")
        # parsed before the operation is spent: a malformed finish changes nothing
        opening, theirs_raw = request.parts()
        theirs = request.theirs(theirs_raw)
        del self._pending[op_id]
        try:
            product = pending.party.finish(opening)
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"aggregator opening refused: {exc}") from exc
        out = self._output(pending, product)
        if theirs.shape != out.shape:
            raise AuthorityRequestMalformed("the aggregator's output share has the wrong shape")
        self._release(pending, out + theirs)
        meta, data = encode_array(out, "u8")
        return {
            Key.ARRAY: meta,
            Key.OP_ID: op_id,
            Key.STEP: pending.kind,
            Key.ROUND_ID: round_id,
        }, data

    def _output(self, pending: _Pending, product: np.ndarray) -> np.ndarray:
        count = sum(len(a.contributors) for a in pending.asks)
        if pending.kind == Step.MOMENTS:
            c = self.shape[1]
            pairs = c * (c + 1) // 2
            return moment_sums(product, count=count, pairs=pairs, samples=pending.rows)
        return score_sums(product, count=count)

    def _release(self, pending: _Pending, total: np.ndarray) -> None:
        """Open the value both parties now hold, and advance the plan on it."""
        values = CODEC.decode(total, frac_bits=2 * pending.fz)
        if pending.kind == Step.MOMENTS:
            h = len(pending.asks[0].contributors)
            moment = symmetric_from_pairs(values / float(h * h), self.shape[1])
            self.policy.released(pending.asks[0], values=moment)
            return
        for ask, value in zip(pending.asks, values, strict=True):
            self.policy.released(ask, values=np.array([float(value) / pending.rows]))
