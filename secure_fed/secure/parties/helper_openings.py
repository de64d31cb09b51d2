"""The helper's openings: linear sums (MAC-checked when authenticated) and evidence.

:class:`OpeningsMachine` is the half of
:class:`~secure_fed.secure.parties.helper.HelperParty` that opens values (the
copies step, :class:`~secure_fed.secure.parties.helper_copies.CopiesMachine`,
is its base; the Beaver products of the moment and the scores,
:class:`~secure_fed.secure.parties.helper_beaver.BeaverMachine`, build on it):
each request arrives parsed
(:mod:`secure_fed.secure.protocol.helper_requests`), every input of the
opening is derived from the helper's own view (the uploads it holds, the
round's plan and the values it helped open) and checked by the release policy
before the helper's share leaves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NoReturn

import numpy as np

from crypto.errors import MacCheckFailed
from crypto.shares import (
    ShareLabel,
)
from crypto.shares.mac import MAC_LANES, PUBLICATION_BITS, MacKeyShare, MacOpening
from secure_fed.errors import (
    AuthorityRequestMalformed,
    SharesOpeningForged,
)
from secure_fed.secure.computation.evidence import evidence_sums, open_sums
from secure_fed.secure.computation.share_ops import (
    evidence_bound,
    weighted_share,
)
from secure_fed.secure.parties.helper_copies import CopiesMachine, Reply
from secure_fed.secure.protocol.helper_requests import (
    MAC_EVIDENCE,
    MAC_PUBLICATION,
    MAC_REVEAL,
    MAC_SEED,
    MAC_SIGMA,
    DistanceAsk,
    LinearRequest,
    MacCheckRequest,
)
from secure_fed.secure.protocol.helper_step_requests import (
    EvidenceRequest,
)
from secure_fed.secure.protocol.vocabulary import (
    AuditEvent,
    HelperOp,
    Key,
    Party,
    Purpose,
    Step,
)
from secure_fed.secure.release_policy import (
    ReleaseRequest,
)
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.wire import (
    encode_array,
)

__all__ = ["OpeningsMachine"]

#: What a MAC-checked opening releases once its check passed: each ask, with its values.
_Release = tuple[ReleaseRequest, np.ndarray | None]


class OpeningsMachine(CopiesMachine):
    """The openings of the helper (a base of ``HelperParty``, which holds the state).

    The attributes below are the helper's fields this half reads and writes.
    """

    mac_key: MacKeyShare | None
    _mac_shares: dict[str, np.ndarray]
    _mac_openings: dict[tuple[int, str], tuple[MacOpening, list[_Release]]]
    _forged_rounds: set[int]

    def _shares(self, ids: tuple[str, ...]) -> tuple[list[str], list[np.ndarray]]:
        uids = list(ids)
        missing = [u for u in uids if u not in self._seeds]
        if missing:
            raise AuthorityRequestMalformed(f"helper holds no share of uploads {missing}")
        self.range_checks.require_passed(uids)
        return uids, [self._seeds[u][1].values().reshape(self.shape) for u in uids]

    def _ask(
        self,
        purpose: str,
        uids: list[str],
        round_id: int,
        weights: tuple[float, ...] | None = None,
        **plan: object,
    ) -> ReleaseRequest:
        """Build the policy's view: contributors named from the uploads the helper holds."""
        score = purpose == Purpose.SCORE
        return ReleaseRequest(
            round_id=round_id,
            purpose=purpose,
            contributors=tuple(self._seeds[u][0] for u in uids),
            value_kind="score" if score else "aggregate",
            shape=(1,) if score else (),
            weights=weights,
            **plan,  # type: ignore[arg-type]
        )

    def _pids(self, uids: list[str]) -> tuple[str, ...]:
        return tuple(self._seeds[u][0] for u in uids)

    # -- linear openings ----------------------------------------------------------------

    def _linear(self, request: LinearRequest | DistanceAsk) -> Reply:
        if isinstance(request, DistanceAsk):
            self._refuse_distance(request)
            raise AssertionError  # unreachable: the refusal raises
        uids, shares = self._shares(request.uids)
        weights = request.weights
        ask = self._ask(request.purpose, uids, request.round_id, weights=weights)
        self.policy.check(ask)
        if self.mac_key is not None and (request.seed_commitment is None or request.share is None):
            raise AuthorityRequestMalformed(
                "an authenticated linear opening carries its MAC fields"
            )
        self._bind(ask, uids)
        out = weighted_share(shares, list(weights))
        if self.mac_key is None:
            self.policy.released(replace(ask, shape=out.shape))
            meta, data = encode_array(out, "u8")
            return {Key.ARRAY: meta}, data
        return self._linear_checked(request, ask, uids, out)

    def _linear_checked(
        self, request: LinearRequest, ask: ReleaseRequest, uids: list[str], out: np.ndarray
    ) -> Reply:
        """First stage of a MAC-checked linear opening: reconstruct, keep, send the share.

        The helper releases the value only once the MAC check passed
        (:meth:`_mac_check`); an opened value outside its bound is already forged.
        """
        assert self.mac_key is not None
        assert request.seed_commitment is not None and request.share is not None
        missing = [u for u in uids if u not in self._mac_shares]
        if missing:
            raise AuthorityRequestMalformed(f"helper holds no MACs of uploads {missing}")
        macs = weighted_share([self._mac_shares[u] for u in uids], list(request.weights))
        opening = MacOpening(
            key=self.mac_key,
            share=out.reshape(-1),
            macs=macs,
            label=ShareLabel(round_id=request.round_id, participant_id="mac", tensor="publication"),
            bound=1 << (PUBLICATION_BITS - 1),
        )
        try:
            opening.expect_seed(request.seed_commitment)
            if request.share.shape != out.shape:
                raise AuthorityRequestMalformed("the aggregator's share has another shape")
            opening.open(request.share)
        except MacCheckFailed as exc:
            self._forged(ask, exc, MAC_PUBLICATION)
        releases: list[_Release] = [(replace(ask, shape=out.shape), None)]
        self._mac_openings[(request.round_id, MAC_PUBLICATION)] = (opening, releases)
        meta, data = encode_array(out, "u8")
        return {Key.ARRAY: meta, MAC_SEED: opening.own_seed().hex()}, data

    def _mac_check(self, request: MacCheckRequest) -> Reply:
        """Serve the coin toss and check values of a MAC-checked opening; release once passed."""
        key = (request.round_id, request.step)
        found = self._mac_openings.get(key)
        if found is None:
            raise AuthorityRequestMalformed(
                f"no MAC-checked opening is open in round {request.round_id}"
            )
        opening, releases = found
        try:
            if request.stage == MAC_REVEAL:
                assert request.opening is not None
                opening.check(request.opening)
            else:
                assert request.seed is not None and request.commitment is not None
                opening.receive_seed(request.seed)
                opening.expect_sigma(request.commitment)
                return {
                    Key.ROUND_ID: request.round_id,
                    MAC_SIGMA: opening.reveal_sigma().hex(),
                }, b""
        except MacCheckFailed as exc:
            self._forged(releases[0][0], exc, request.step)
        del self._mac_openings[key]
        for ask, values in releases:
            if values is None:
                self.policy.released(ask)
            else:
                self.policy.released(ask, values=values)
        return {Key.OK: True, Key.ROUND_ID: request.round_id}, b""

    def _forged(self, ask: ReleaseRequest, exc: MacCheckFailed, step: str) -> NoReturn:
        """Abort the round on a failed MAC check: audit it, refuse every later opening."""
        self._forged_rounds.add(ask.round_id)
        for key in [k for k in self._mac_openings if k[0] == ask.round_id]:
            del self._mac_openings[key]
        if self.audit is not None:
            self.audit.record(
                AuditEvent.ACCESS_DENIED,
                {
                    "party": Party.HELPER,
                    "op": HelperOp.MAC_CHECK,
                    "step": step,
                    "peer": "aggregator",
                    "round_id": ask.round_id,
                    "code": SharesOpeningForged.code,
                    "reason": str(exc),
                },
            )
        raise SharesOpeningForged(f"the aggregator's share of the {step}: {exc}") from exc

    # -- evidence of correctness: the plan's slice mask on the helper's own shares ------

    def _evidence(self, request: EvidenceRequest) -> Reply:
        """Open one evidence scalar per upload, the helper applying the plan's mask itself.

        The request names the uploads and the slice it means (refused unless it is
        the plan's) and carries the aggregator's sums; another mask on the
        aggregator's side only shifts each value by an offset the aggregator knows.
        """
        round_id, theirs = request.round_id, request.theirs
        uids, shares = self._shares(request.uids)
        tracker = self.plans.tracker(round_id)
        view: dict[str, object] = {"step": Step.EVIDENCE, "evidence": request.evidence}
        if tracker is not None:
            view.update(roster=tracker.roster, samples=tracker.rows(Step.EVIDENCE))
        asks = [self._ask(Purpose.SCORE, [u], round_id, None, **view) for u in uids]
        if len(set(self._pids(uids))) != len(uids):
            self.policy.refuse(asks[0], "one evidence scalar per participant; ids repeat")
        for ask in asks:
            self.policy.check(ask)
        self._bind(asks[0], uids)
        piece = self._tracker(asks[0]).plan.evidence
        assert piece is not None  # the plan allowed an evidence step
        mine = evidence_sums(shares, piece)
        if self.mac_key is not None:
            return self._evidence_checked(request, asks, uids, mine, piece)
        values = open_sums(mine, theirs, rows=len(piece.rows), classes=self.shape[1])
        for ask, value in zip(asks, values, strict=True):
            self.policy.released(ask, values=np.array([value]))
        meta, data = encode_array(mine, "u8")
        return {Key.ARRAY: meta, Key.STEP: Step.EVIDENCE, Key.ROUND_ID: round_id}, data

    def _evidence_checked(
        self,
        request: EvidenceRequest,
        asks: list[ReleaseRequest],
        uids: list[str],
        mine: np.ndarray,
        piece: EvidenceSlice,
    ) -> Reply:
        """Open the evidence scalars MAC-checked; release them once the check passed."""
        assert self.mac_key is not None
        if request.seed_commitment is None:
            raise AuthorityRequestMalformed(
                "an authenticated evidence opening carries its MAC fields"
            )
        n, c = self.shape
        macs = np.stack(
            [
                evidence_sums([self._mac_shares[u][lane].reshape(n, c) for u in uids], piece)
                for lane in range(MAC_LANES)
            ]
        )
        opening = MacOpening(
            key=self.mac_key,
            share=mine,
            macs=macs,
            label=ShareLabel(round_id=request.round_id, participant_id="mac", tensor=MAC_EVIDENCE),
            bound=evidence_bound(len(piece.rows), c),
        )
        try:
            opening.expect_seed(request.seed_commitment)
            total = opening.open(request.theirs)
        except MacCheckFailed as exc:
            self._forged(asks[0], exc, MAC_EVIDENCE)
        values = open_sums(total, np.zeros_like(total), rows=len(piece.rows), classes=c)
        releases: list[_Release] = [
            (ask, np.array([value])) for ask, value in zip(asks, values, strict=True)
        ]
        self._mac_openings[(request.round_id, MAC_EVIDENCE)] = (opening, releases)
        meta, data = encode_array(mine, "u8")
        head: dict[str, object] = {Key.ARRAY: meta, Key.STEP: Step.EVIDENCE}
        head.update({Key.ROUND_ID: request.round_id, MAC_SEED: opening.own_seed().hex()})
        return head, data
