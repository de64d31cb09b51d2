"""The helper's copies state machine: near-duplicate counts opened, never a pair bit or distance.

In shares mode the copies step compares every pair distance of the copy set with a
public threshold without opening it: the helper and the aggregator run the dealt
comparison material (``compare``), convert the shared bits (``convert``) and open only
each member's count of near-duplicates (``count``). :class:`CopiesMachine` is that
state machine of :class:`~secure_fed.secure.parties.helper.HelperParty` (its
openings are the other half): it checks each request against the helper's own view
(the uploads it holds, the round's plan), audits refusals, and releases the counts
through the release policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import (
    BeaverParty,
    RangeCheckParty,
    RangeMaterial,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
    TripleShare,
)
from crypto.shares.wire import open_sealed
from secure_fed.errors import AuthorityRequestMalformed, ScoringInvalid
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.computation.requests import distance_request
from secure_fed.secure.computation.share_copies import (
    arithmetic_bits,
    bit_factors,
    check_distance_room,
    copies_upper,
    count_shares,
    distance_factors,
    distance_sums,
    open_counts,
)
from secure_fed.secure.computation.share_range import (
    COMPARE_PARTICIPANT,
    HelperRangeChecks,
    compare_spec,
)
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.protocol.helper_requests import DistanceAsk
from secure_fed.secure.protocol.helper_step_requests import CopiesRequest
from secure_fed.secure.protocol.vocabulary import (
    AuditEvent,
    CopiesStage,
    Key,
    Party,
    Purpose,
    Step,
)
from secure_fed.secure.release_plan import PlanBook, PlanTracker
from secure_fed.secure.release_policy import ReleasePolicy, ReleaseRequest

__all__ = [
    "COPIES_STEP_LABEL",
    "CopiesMachine",
    "CopiesRun",
    "Reply",
]

Reply = tuple[dict[str, object], bytes]
#: Registry label that marks a round's copies step as run (one run per round).
COPIES_STEP_LABEL = "copies-step"


@dataclass
class CopiesRun:
    """One running comparison of the copies step (its dealt material and stage)."""

    party: RangeCheckParty
    asks: list[ReleaseRequest]
    pids: tuple[str, ...]
    stage: str = CopiesStage.COMPARE  # then CONVERT (bits compared), COUNT (bits converted)
    counts: np.ndarray | None = None  # the helper's count shares, once converted


class CopiesMachine:
    """The copies step of the helper (a base of ``HelperParty``, which holds the state).

    The attributes below are the helper's fields this half reads and writes; the two
    methods are the helper's (plan lookup and upload binding).
    """

    shape: tuple[int, int]
    audit: AuditSink | None
    dealer_key: ShareMacKey
    channel_key: ShareMacKey
    registry: HelperRegistry
    policy: ReleasePolicy
    plans: PlanBook
    range_checks: HelperRangeChecks
    _seeds: dict[str, tuple[str, ShareBundle]]
    _copies_runs: dict[str, CopiesRun]
    _round_uploads: dict[int, dict[str, str]]

    def _tracker(self, ask: ReleaseRequest) -> PlanTracker:
        raise NotImplementedError  # the helper's

    def _bind(self, ask: ReleaseRequest, uids: list[str]) -> None:
        raise NotImplementedError  # the helper's

    # -- near-duplicates: counts opened, no pair bit, no distance -----------------------

    def _refuse_distance(self, request: DistanceAsk) -> None:
        """Refuse (audited) a linear or Beaver opening asked for under a distance's name."""
        pids = tuple(self._seeds[u][0] if u in self._seeds else f"upload {u}" for u in request.uids)
        ask = distance_request(
            round_id=request.round_id,
            pair=pids,  # type: ignore[arg-type]
            members=pids,
            samples=self.shape[0],
        )
        self.policy.refuse(
            ask, "a pair distance is never opened in shares mode; only the near-duplicate counts"
        )

    def _copies(self, request: CopiesRequest) -> Reply:
        """Serve the copies step: start it (the request names the uploads), or take a step."""
        round_id, check = request.round_id, request.check
        if request.uids is not None:
            return self._copies_start(request, request.uids)
        run = self._copies_runs.get(check)
        if run is None or run.asks[0].round_id != round_id:
            raise AuthorityRequestMalformed(f"no running copies comparison {check!r}")
        stage = request.stage
        if stage != run.stage:
            raise AuthorityRequestMalformed(f"copies {check!r} is at {run.stage!r}, not {stage!r}")
        if stage == CopiesStage.CONVERT:
            return self._copies_convert(run, request)
        if stage == CopiesStage.COUNT:
            return self._copies_count(run, check, request.payload, round_id)
        return self._copies_step(run, check, round_id, request.payload)

    def _copy_asks(
        self, request: CopiesRequest, uids: tuple[str, ...]
    ) -> tuple[list[str], tuple[str, ...], list[ReleaseRequest]]:
        """Check a copies request against the helper's view; refusals are audited.

        The pairs are every pair of the named uploads (the helper derives them);
        a refusal names all the request's participants.
        """
        round_id = request.round_id
        pids = tuple(self._seeds[u][0] if u in self._seeds else f"upload {u}" for u in uids)
        whole = distance_request(round_id=round_id, pair=pids, members=pids, samples=self.shape[0])  # type: ignore[arg-type]
        missing = [u for u in uids if u not in self._seeds]
        if missing:
            self.policy.refuse(whole, f"helper holds no share of uploads {missing}")
        if len(set(pids)) != len(pids):
            self.policy.refuse(whole, "a participant appears twice: a pair is two distinct members")
        unchecked = [u for u in uids if not self.range_checks.verdicts.get(u, False)]
        if unchecked:
            self.policy.refuse(whole, f"uploads {unchecked} have not passed the range check")
        if request.carried:
            self.policy.refuse(
                whole,
                f"the helper derives {list(request.carried)} itself and opens no distance; "
                "the request set them",
            )
        order = sorted(range(len(uids)), key=lambda i: pids[i])
        ordered, pids = [uids[i] for i in order], tuple(pids[i] for i in order)
        asks = [
            distance_request(
                round_id=round_id, pair=(pids[a], pids[b]), members=pids, samples=self.shape[0]
            )
            for a, b in combinations(range(len(pids)), 2)
        ]
        if not asks:
            self.policy.refuse(whole, "the copies step needs at least two uploads")
        for ask in asks:
            self.policy.check(ask)
        return ordered, pids, asks

    def _copies_start(self, request: CopiesRequest, named: tuple[str, ...]) -> Reply:
        check, round_id = request.check, request.round_id
        uids, pids, asks = self._copy_asks(request, named)
        tensor = request.triple_label()
        if tensor == COPIES_STEP_LABEL or check in self._copies_runs:
            self.policy.refuse(asks[0], f"labels {tensor!r}, {check!r} are not fresh")
        scored = self._round_uploads.get(round_id, {})
        swapped = [u for u, p in zip(uids, pids, strict=True) if scored.get(p) != u]
        if swapped:
            self.policy.refuse(asks[0], f"uploads {swapped} are not the ones this round scored")
        self._bind(asks[0], uids)
        # one run per round (persisted with the triple labels): the counts open once
        if not self.registry.claim_triple(round_id, COPIES_STEP_LABEL):
            self.policy.refuse(asks[0], f"the copies step of round {round_id} already ran")
        if not self.registry.claim_triple(round_id, tensor):
            self.policy.refuse(asks[0], f"Beaver triple label {tensor!r} was already used")
        shares = [self._seeds[u][1].values() for u in uids]
        check_distance_room(int(shares[0].size))
        x = distance_factors(shares)
        tracker = self._tracker(asks[0])
        upper = copies_upper(tracker)
        parts = request.parts(3, "a copies start carries triples, material, opening")
        triples, material, theirs = parts
        try:
            label = ShareLabel(round_id=round_id, participant_id="beaver", tensor=tensor)
            triple = TripleShare.parse(
                open_sealed(self.dealer_key, triples),
                key=self.dealer_key,
                label=label,
                party=1,
                count=x.size,
            )
            beaver = BeaverParty(triples=triple, channel_key=self.channel_key)
            opening = beaver.open(x, x)
            sums = distance_sums(beaver.finish(theirs), pairs=len(asks))
            cmp_label = ShareLabel(
                round_id=round_id, participant_id=COMPARE_PARTICIPANT, tensor=check
            )
            parsed = RangeMaterial.parse(
                open_sealed(self.dealer_key, material),
                key=self.dealer_key,
                label=cmp_label,
                party=1,
                count=len(asks),
                spec=compare_spec(upper),
            )
            party = RangeCheckParty(material=parsed, channel_key=self.channel_key, keep_shared=True)
            first = party.start(sums)
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"copies step refused: {exc}") from exc
        self._copies_runs[check] = CopiesRun(party, asks, pids)
        head: dict[str, object] = {
            Key.STEP: Step.COPIES,
            Key.ROUND_ID: round_id,
            Key.PARTS: [len(opening), len(first)],
        }
        return head, opening + first

    def _copies_step(self, run: CopiesRun, check: str, round_id: int, payload: bytes) -> Reply:
        """Take one comparison step; at its end the helper holds XOR shares of the bits."""
        try:
            mine = run.party.advance(payload)
        except CryptoError as exc:
            del self._copies_runs[check]
            raise AuthorityRequestMalformed(f"copies comparison refused: {exc}") from exc
        head: dict[str, object] = {Key.STEP: Step.COPIES, Key.ROUND_ID: round_id}
        if mine is not None:
            return {**head, Key.PARTS: [len(mine)]}, mine
        run.stage = CopiesStage.CONVERT  # nothing opened: the bits stay shared
        return {**head, Key.PARTS: []}, b""

    def _copies_convert(self, run: CopiesRun, request: CopiesRequest) -> Reply:
        """Convert the shared bits to additive shares (one Beaver product ``b0 b1`` each)."""
        tensor, round_id = request.triple_label(), request.round_id
        if tensor == COPIES_STEP_LABEL or not self.registry.claim_triple(round_id, tensor):
            self.policy.refuse(run.asks[0], f"Beaver triple label {tensor!r} was already used")
        parts = request.parts(2, "a bit conversion carries triples and an opening")
        bits = run.party.verdict_shares
        try:
            label = ShareLabel(round_id=round_id, participant_id="beaver", tensor=tensor)
            triple = TripleShare.parse(
                open_sealed(self.dealer_key, parts[0]),
                key=self.dealer_key,
                label=label,
                party=1,
                count=bits.size,
            )
            beaver = BeaverParty(triples=triple, channel_key=self.channel_key)
            opening = beaver.open(*bit_factors(bits, party=1))
            product = beaver.finish(parts[1])
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"copies bit conversion refused: {exc}") from exc
        run.counts = count_shares(arithmetic_bits(bits, product), members=len(run.pids))
        run.stage = CopiesStage.COUNT
        return {Key.STEP: Step.COPIES, Key.ROUND_ID: round_id, Key.PARTS: [len(opening)]}, opening

    def _copies_count(self, run: CopiesRun, check: str, payload: bytes, round_id: int) -> Reply:
        """Open the counts with the aggregator's shares, record the release, send this side's."""
        assert run.counts is not None  # the stage is COUNT
        if len(payload) != 8 * len(run.pids):  # refused before the run is spent
            raise AuthorityRequestMalformed(
                f"the aggregator's count shares are {len(run.pids)} u8 values, "
                f"not {len(payload)} bytes"
            )
        del self._copies_runs[check]
        theirs = np.frombuffer(payload, dtype="<u8").astype(np.uint64)
        try:
            opened = open_counts(run.counts, theirs, members=len(run.pids))
        except ScoringInvalid as exc:
            raise AuthorityRequestMalformed(f"copies counts refused: {exc}") from exc
        counts = dict(zip(run.pids, opened, strict=True))
        self._release_copies(run, round_id, counts)
        mine = run.counts.astype("<u8").tobytes()
        return {
            Key.STEP: Step.COPIES,
            Key.ROUND_ID: round_id,
            Key.PARTS: [len(mine)],
            Key.COPIES: opened,
        }, mine

    def _release_copies(self, run: CopiesRun, round_id: int, counts: dict[str, int]) -> None:
        """Record the step's pairs as released (no bit, no distance opened), then the counts."""
        for ask in run.asks:
            self.policy.released(ask, values=None)
        tracker = self.plans.tracker(round_id)
        assert tracker is not None  # the plan allowed every pair
        tracker.copies = dict(counts)
        if self.audit is not None:
            self.audit.record(
                AuditEvent.DECRYPTION_RELEASED,
                {
                    "party": Party.HELPER,
                    "round_id": round_id,
                    "purpose": Purpose.DISTANCE,
                    "step": Step.COPIES,
                    "contributors": len(run.pids),
                    "participant_ids": list(run.pids),
                    "shape": [len(run.pids)],
                    "central_dp": False,
                    "copies": counts,
                    "pairs": len(run.asks),
                },
            )
