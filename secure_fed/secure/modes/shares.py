"""``shares`` aggregation mode: two additive shares over Z_2^64, Beaver-squared scores.

Participant side (:class:`SharesEncoder`, holding its :class:`SharesEnrolment`):
fixed-point encode (``RING_PREDICTIONS``, 12 fractional bits, bound 8), split
with a fresh PRG seed (:func:`crypto.shares.split_with_seed`); the explicit
share goes to the aggregator tagged with HMAC-SM3, the 32-byte seed goes to the
helper tagged and sealed with SM4-GCM under a key the aggregator does not hold.
The upload is about ``8 N C`` bytes plus a few hundred (under 1 MB for 10,000 x 10).

Server side (:class:`SharesAggregator`, party 0, holding :class:`SharesKeys`) and
:class:`~secure_fed.secure.parties.helper.HelperParty` (party 1) run the same
local steps; the key authority deals Beaver triples and holds no shares.
Openings happen only through the helper's gate: weighted sums over at least
``min_participants``, pooled second moments, scalar scores (one
:class:`SharesScoringRound` per round), evidence scalars, and at the plan's
``copies`` step one near-duplicate count each (never a distance or a pair). A
participant that drops out contributes nothing: sums run over the uploads
present. A tampered share fails its tag (``ShareTampered`` -> ``UploadMalformed``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import NoReturn, Protocol

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import (
    RING_PREDICTIONS,
    BeaverParty,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
    TripleShare,
    split_with_seed,
)
from crypto.sm import SM4GCM
from secure_fed.errors import (
    AggregationInvalid,
    ModeSetupInvalid,
    OpeningRefused,
    UploadMalformed,
)
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.mode import (
    AggregateHandle,
    AggregationMode,
    UploadEncoder,
    UploadHandle,
    normalized_weights,
    register_mode,
)
from secure_fed.secure.modes.evidence import evidence_sums, open_sums, slice_fields
from secure_fed.secure.modes.planned import PlannedAggregator, score_request
from secure_fed.secure.modes.share_copies import run_copies
from secure_fed.secure.modes.share_ops import (
    centred_difference,
    check_moment_room,
    moment_sums,
    pair_factors,
    score_plan,
    score_sums,
    weighted_share,
    whiten_shares,
)
from secure_fed.secure.modes.share_range import RangeDealer, check_upload
from secure_fed.secure.parties.helper import (
    HelperParty,
    helper_request,
    plan_request,
    reply_array,
    seal_key,
)
from secure_fed.secure.parties.key_authority import (
    KeyAuthority,
    compare_request,
    deal_request,
)
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.mahalanobis import (
    ScoringConfig,
    symmetric_from_pairs,
)
from secure_fed.secure.server_auth import ChannelKey, ServerSigningKey
from secure_fed.wire import (
    SHARES_UPLOAD,
    decode_frame,
    encode_array,
    encode_frame,
)

__all__ = [
    "SharesAggregator",
    "SharesDeployment",
    "SharesEncoder",
    "SharesEnrolment",
    "SharesKeys",
    "SharesMode",
    "SharesScoringRound",
]

_log = logging.getLogger(__name__)

CODEC = RING_PREDICTIONS
SECRET_BYTES = 32
Channel = Callable[[bytes], bytes]


class Dealer(Protocol):
    """Byte channel to the triple dealer: a signed deal request in, two blobs out.

    The request is built by :func:`~secure_fed.secure.parties.dealer.deal_request`
    with the aggregator's SM2 key; the reply is (blob for the aggregator, blob for
    the helper), as :meth:`KeyAuthority.handle_deal` returns it.
    """

    def __call__(self, request: bytes) -> tuple[bytes, bytes]:
        """Deal the triples a signed ``request`` asks for."""
        ...


def _secret(name: str, value: object) -> bytes:
    if not isinstance(value, bytes) or len(value) < SECRET_BYTES:
        raise ModeSetupInvalid(f"{name} must be at least {SECRET_BYTES} bytes")
    return value


@dataclass(frozen=True, kw_only=True)
class SharesEnrolment:
    """One participant's enrolment: a secret shared with the aggregator, one with the helper.

    Never shown by ``repr`` and never pickled.
    """

    participant_id: str
    aggregator_secret: bytes = field(repr=False)
    helper_secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.participant_id, str) or not self.participant_id:
            raise ModeSetupInvalid(
                f"participant_id must be a non-empty string, got {self.participant_id!r}"
            )
        _secret("aggregator_secret", self.aggregator_secret)
        _secret("helper_secret", self.helper_secret)

    @classmethod
    def generate(cls, participant_id: str) -> SharesEnrolment:
        """Fresh random secrets (from :mod:`secrets`) for ``participant_id``."""
        return cls(
            participant_id=participant_id,
            aggregator_secret=secrets.token_bytes(SECRET_BYTES),
            helper_secret=secrets.token_bytes(SECRET_BYTES),
        )

    def __reduce__(self) -> NoReturn:
        raise TypeError("SharesEnrolment cannot be pickled")


@dataclass(frozen=True, kw_only=True)
class SharesKeys:
    """What the shares aggregator (party 0) holds. Never pickled.

    Parameters
    ----------
    secrets
        Each participant's enrolment secret shared with the aggregator.
    helper
        Bytes channel to :meth:`HelperParty.handle`.
    dealer
        Byte channel to the Beaver-triple dealer (the key authority's
        :meth:`~KeyAuthority.handle_deal` with the MAC keys bound); it deals only
        for requests signed with ``signing_key``.
    dealer_key, channel_key
        MAC keys of the dealer's blobs to the aggregator and of the helper channel.
    range_dealer
        Byte channel to the dealer of the range check every upload passes at load
        (the key authority's :meth:`~KeyAuthority.handle_deal_range`); it deals only
        for requests signed with ``signing_key``.
    compare_dealer
        Byte channel to the dealer of the copies step's per-pair comparison (the
        key authority's :meth:`~KeyAuthority.handle_deal_compare`), signed likewise.
    request_key
        HMAC-SM3 key of the aggregator's requests to the helper (it tags every
        request: plan, load, range, linear, open, finish; the helper serves none
        without it).
    signing_key
        The aggregator's SM2 key; it signs every deal request to the key authority.
    """

    secrets: Mapping[str, bytes] = field(repr=False)
    helper: Channel
    dealer: Dealer
    dealer_key: ShareMacKey
    channel_key: ShareMacKey
    range_dealer: RangeDealer | None = None
    compare_dealer: RangeDealer | None = None
    request_key: ChannelKey | None = field(default=None, repr=False)
    signing_key: ServerSigningKey | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.secrets:
            raise ModeSetupInvalid("secrets must name at least one participant")
        for pid, secret in self.secrets.items():
            _secret(f"secret of {pid!r}", secret)
        if not callable(self.helper) or not callable(self.dealer):
            raise ModeSetupInvalid("helper and dealer must be callables (byte channels)")
        for name in ("dealer_key", "channel_key"):
            if not isinstance(getattr(self, name), ShareMacKey):
                raise ModeSetupInvalid(f"{name} must be a ShareMacKey")
        if self.request_key is not None and not isinstance(self.request_key, ChannelKey):
            raise ModeSetupInvalid("request_key must be a ChannelKey")
        if self.signing_key is not None and not isinstance(self.signing_key, ServerSigningKey):
            raise ModeSetupInvalid("signing_key must be a ServerSigningKey")

    def tagged(self, header: Mapping[str, object], payload: bytes, *, round_id: int) -> bytes:
        """Tag a helper request with :attr:`request_key` (bound to its op and ``round_id``).

        Raises
        ------
        ModeSetupInvalid
            If no request key is configured.
        """
        if self.request_key is None:
            raise ModeSetupInvalid("request_key is needed to send requests to the helper")
        return helper_request(header, payload, key=self.request_key, round_id=round_id)

    def deal(self, *, round_id: int, tensor: str, count: int) -> tuple[bytes, bytes]:
        """Ask the dealer for ``count`` triples labelled ``(round_id, tensor)``, signed.

        Raises
        ------
        ModeSetupInvalid
            If no signing key is configured.
        """
        if self.signing_key is None:
            raise ModeSetupInvalid("signing_key is needed to ask the key authority for triples")
        return self.dealer(
            deal_request(round_id=round_id, tensor=tensor, count=count, signer=self.signing_key)
        )

    def deal_range(self, *, round_id: int, tensor: str, count: int) -> tuple[bytes, bytes]:
        """Ask for one upload's range-check material (``round_id``: the current round), signed.

        Raises
        ------
        ModeSetupInvalid
            If no range dealer or no signing key is configured.
        """
        if self.range_dealer is None or self.signing_key is None:
            raise ModeSetupInvalid("a range dealer and signing_key are needed for range checks")
        request = deal_request(
            round_id=round_id, tensor=tensor, count=count, signer=self.signing_key, purpose="range"
        )
        return self.range_dealer(request)

    def deal_compare(
        self, *, round_id: int, tensor: str, count: int, upper: int
    ) -> tuple[bytes, bytes]:
        """Ask for ``count`` per-value comparisons with ``[0, upper]`` (the copies step), signed.

        Raises
        ------
        ModeSetupInvalid
            If no comparison dealer or no signing key is configured.
        """
        if self.compare_dealer is None or self.signing_key is None:
            raise ModeSetupInvalid("a comparison dealer and signing_key are needed for copies")
        request = compare_request(
            round_id=round_id, tensor=tensor, count=count, upper=upper, signer=self.signing_key
        )
        return self.compare_dealer(request)

    def __reduce__(self) -> NoReturn:
        raise TypeError("SharesKeys cannot be pickled")


class SharesEncoder(UploadEncoder):
    """Participant side: encode, split, tag the aggregator's share, seal the helper's seed."""

    def __init__(self, *, shape: tuple[int, int], bound: float, enrolment: SharesEnrolment) -> None:
        if not isinstance(enrolment, SharesEnrolment):
            raise ModeSetupInvalid("enrolment must be a SharesEnrolment")
        if bound > CODEC.clip_bound:
            raise ModeSetupInvalid(f"bound {bound} exceeds the ring codec's {CODEC.clip_bound}")
        self.shape, self.bound, self.pid = shape, bound, enrolment.participant_id
        self._agg_key = ShareMacKey.derive(enrolment.aggregator_secret, recipient="aggregator")
        self._helper_key = ShareMacKey.derive(enrolment.helper_secret, recipient="helper")
        self._seal = SM4GCM(seal_key(enrolment.helper_secret))

    def encode(self, predictions: np.ndarray) -> bytes:
        """Return ``SFSH`` payload bytes: aggregator share frame + sealed helper seed frame."""
        arr = np.asarray(predictions, dtype=np.float64)
        if arr.shape != tuple(self.shape):
            raise AggregationInvalid(f"predictions shape {arr.shape} differs from {self.shape}")
        uid = secrets.token_hex(8)
        label = ShareLabel(round_id=0, participant_id=self.pid, tensor=f"pred-{uid}")
        ring = CODEC.encode_clipped(np.clip(arr, -self.bound, self.bound)).reshape(-1)
        share0, seed = split_with_seed(ring, label=label)
        f = CODEC.frac_bits
        blob0 = ShareBundle.from_values(share0, label=label, party=0, frac_bits=f).to_bytes(
            self._agg_key
        )
        bundle1 = ShareBundle.from_seed(seed, label=label, count=ring.size, frac_bits=f)
        sealed = self._seal.encrypt(
            bundle1.to_bytes(self._helper_key), associated_data=f"{self.pid}|{uid}".encode()
        )
        head: dict[str, object] = {
            "participant_id": self.pid,
            "upload_id": uid,
            "parts": [len(blob0), len(sealed)],
        }
        return encode_frame(SHARES_UPLOAD, head, blob0 + sealed)


class _ShareUpload(UploadHandle):
    __slots__ = ("pid", "share", "uid")

    def __init__(self, pid: str, uid: str, share: np.ndarray) -> None:
        self.pid, self.uid, self.share = pid, uid, share


class _ShareAggregate(AggregateHandle):
    __slots__ = ("pids", "share", "uids", "weights")

    def __init__(
        self, pids: list[str], uids: list[str], weights: list[float], share: np.ndarray
    ) -> None:
        self.pids, self.uids, self.weights, self.share = pids, uids, weights, share


def _call(
    keys: SharesKeys, header: dict[str, object], *parts: bytes, round_id: int
) -> tuple[dict[str, object], object]:
    header = {**header, "parts": [len(p) for p in parts]}
    return reply_array(keys.helper(keys.tagged(header, b"".join(parts), round_id=round_id)))


def _open_linear(
    keys: SharesKeys, aggregate: _ShareAggregate, tracker: PlanTracker, round_id: int
) -> np.ndarray:
    ask = ReleaseRequest(
        round_id=round_id,
        purpose="aggregate",
        contributors=tuple(aggregate.pids),
        value_kind="aggregate",
        shape=(),
        weights=tuple(aggregate.weights),
    )
    _plan_check(tracker, ask)
    header: dict[str, object] = {
        "op": "linear",
        "purpose": "aggregate",
        "uids": aggregate.uids,
        "weights": aggregate.weights,
        "round_id": round_id,
    }
    _, other = _call(keys, header, round_id=round_id)
    tracker.record(ask, None)
    total = aggregate.share + np.asarray(other, dtype=np.uint64)
    return CODEC.decode(total, frac_bits=CODEC.frac_bits + 16)


def _plan_check(tracker: PlanTracker, ask: ReleaseRequest) -> None:
    """Hold this side (and so the helper's replies) to the round's plan."""
    tracker.require(ask, OpeningRefused)


class SharesAggregator(PlannedAggregator):
    """Party 0 of the shares mode; opens only through the helper's gate.

    Parameters
    ----------
    shape, bound
        ``(N_pub, C)`` and the public clip bound.
    keys
        Enrolment secrets, helper and dealer channels, MAC keys.
    scoring
        Robust pooled Mahalanobis parameters (defaults when ``None``).
    min_participants
        The helper's minimum (a default release plan asks for it).
    detect_copies
        Ask the engine's plans for the ``copies`` step (one near-duplicate count
        per member of the accepted set, opened to both servers; no distance, no
        pair's bit):
        ``u_k = 1 / (1 + copies_k)`` applies as in the other modes. ``None``
        (default): when ``keys`` has a comparison dealer (``compare_dealer``).
    """

    def __init__(
        self,
        *,
        shape: tuple[int, int],
        bound: float,
        keys: SharesKeys,
        scoring: ScoringConfig | None = None,
        min_participants: int = 2,
        detect_copies: bool | None = None,
    ) -> None:
        if not isinstance(keys, SharesKeys):
            raise ModeSetupInvalid("keys must be SharesKeys (secrets, helper, dealer, MAC keys)")
        self.shape, self.bound, self.keys = shape, bound, keys
        self._macs = {
            p: ShareMacKey.derive(s, recipient="aggregator") for p, s in keys.secrets.items()
        }
        self.scoring = scoring or ScoringConfig()
        self.min_participants = min_participants
        found = keys.compare_dealer is not None if detect_copies is None else detect_copies
        self.detects_copies = bool(found)
        self._plans: dict[int, PlanTracker] = {}

    def begin_round(self, plan: ReleasePlan) -> None:
        """Fix ``plan`` with the helper and run the same plan state machine here."""
        if plan.min_participants < self.min_participants:  # never below the gatekeeper's
            plan = replace(plan, min_participants=self.min_participants)
        if self.keys.request_key is None:
            raise ModeSetupInvalid("request_key is needed to fix a release plan with the helper")
        _, fixed = reply_array(self.keys.helper(plan_request(plan, key=self.keys.request_key)))
        if not isinstance(fixed, bytes):
            raise OpeningRefused("the helper did not return the plan it fixed")
        plan = ReleasePlan.from_bytes(fixed)  # the helper's plan is the one that holds
        self._plans[plan.round_id] = PlanTracker(plan=plan, enrolled=frozenset(self.keys.secrets))

    def load(self, payload: bytes) -> UploadHandle:
        """Verify the aggregator's share tag and hand the sealed seed to the helper."""
        try:
            limit = 16 * self.shape[0] * self.shape[1] + (1 << 16)
            head, body = decode_frame(payload, SHARES_UPLOAD, max_bytes=limit)
        except Exception as exc:
            raise UploadMalformed(f"shares upload frame refused: {exc}") from exc
        pid, uid, parts = head.get("participant_id"), head.get("upload_id"), head.get("parts")
        if pid not in self._macs or not isinstance(uid, str):
            raise UploadMalformed(f"shares upload names an unknown participant {pid!r}")
        if not isinstance(parts, list) or len(parts) != 2:
            raise UploadMalformed("shares upload needs two parts")
        if not all(isinstance(p, int) and p >= 0 for p in parts) or sum(parts) != len(body):
            raise UploadMalformed("shares upload parts do not match the payload")
        label = ShareLabel(round_id=0, participant_id=str(pid), tensor=f"pred-{uid}")
        try:
            bundle = ShareBundle.parse(
                body[: parts[0]],
                key=self._macs[str(pid)],
                label=label,
                party=0,
                count=self.shape[0] * self.shape[1],
            )
        except CryptoError as exc:
            raise UploadMalformed(f"aggregator share of {pid!r} refused: {exc}") from exc
        load: dict[str, object] = {"op": "load", "participant_id": pid, "upload_id": uid}
        round_id = max(self._plans, default=0)  # the newest round whose plan is fixed
        _call(self.keys, load, body[parts[0] :], round_id=round_id)
        check_upload(self.keys, pid=str(pid), uid=uid, share=bundle.values(), round_id=round_id)
        return _ShareUpload(str(pid), uid, bundle.values().reshape(self.shape))

    def _uploads(self, handles: Mapping[str, UploadHandle]) -> dict[str, _ShareUpload]:
        out = {}
        for pid, h in handles.items():
            if not isinstance(h, _ShareUpload) or h.pid != pid:
                raise AggregationInvalid(f"handle of {pid!r} is not that participant's upload")
            out[pid] = h
        return out

    def weighted_sum(
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        """Local weighted sum of party 0's shares (weights renormalised, zeros dropped)."""
        ids, w = normalized_weights(handles, weights)
        ups = self._uploads(handles)
        share = weighted_share([ups[p].share for p in ids], w)
        return _ShareAggregate(ids, [ups[p].uid for p in ids], w, share)

    def reveal(self, aggregate: AggregateHandle, *, round_id: int) -> np.ndarray:
        """Open the round's one publication with the helper (both check it against the plan)."""
        if not isinstance(aggregate, _ShareAggregate):
            raise AggregationInvalid("aggregate is not a shares aggregate")
        tracker = self._tracker(round_id, scored=False)
        return _open_linear(self.keys, aggregate, tracker, round_id).astype(np.float32)

    def evidence(
        self, handles: Mapping[str, UploadHandle], mask: np.ndarray, *, round_id: int
    ) -> dict[str, float]:
        """Open the evidence of correctness per upload with the helper, one scalar each.

        Each party applies the slice's integer mask to its own shares (local); the
        request names the plan's slice and carries this side's sums, the helper
        applies its own plan's mask and replies with its sums (a symmetric opening).

        Raises
        ------
        ScoringInvalid, OpeningRefused
            No slice in the plan, another mask, or a release the plan refuses.
        """
        tracker, piece, asks = self.evidence_asks(
            handles, mask, round_id=round_id, refusal=OpeningRefused
        )
        ids = [ask.contributors[0] for ask in asks]
        ups = self._uploads(handles)
        mine = evidence_sums([ups[p].share for p in ids], piece)
        meta, raw = encode_array(mine, "u8")
        head: dict[str, object] = {
            "op": "evidence",
            "uids": [ups[p].uid for p in ids],
            "round_id": round_id,
            "array": meta,
            **slice_fields(piece),
        }
        reply, theirs = _call(self.keys, head, raw, round_id=round_id)
        if reply.get("step") != "evidence" or reply.get("round_id") != round_id:
            raise OpeningRefused(f"helper reply does not answer the evidence of round {round_id}")
        values = open_sums(
            mine, np.asarray(theirs, dtype=np.uint64), rows=len(piece.rows), classes=self.shape[1]
        )
        for ask, value in zip(asks, values, strict=True):
            tracker.record(ask, np.array([value]))
        return dict(zip(ids, values, strict=True))

    def copies(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> dict[str, int] | None:
        """Near-duplicate count per accepted upload; only the counts are opened.

        Both servers compute each pair's ``D_jk`` as shares (one batch of Beaver
        products on ``x_j - x_k``), compare it with the threshold they each
        derive from the plan and sum the comparison bits per participant, all on
        shares (:mod:`~secure_fed.secure.modes.share_copies`); only the counts
        are opened, to both. ``None`` when the round's plan has no ``copies`` step.

        Raises
        ------
        OpeningRefused, ScoringInvalid
            A pair the plan refuses, or counts the helper does not confirm.
        """
        found = self.distance_asks(handles, round_id=round_id, refusal=OpeningRefused)
        if found is None:
            return None
        tracker, asks = found
        ups = self._uploads(handles)
        ids = sorted(ups)
        opened, last = run_copies(
            self.keys,
            uids=[ups[p].uid for p in ids],
            shares=[ups[p].share for p in ids],
            tracker=tracker,
            round_id=round_id,
        )
        counts = dict(zip(ids, opened, strict=True))
        if last.get("copies") != opened:
            raise OpeningRefused("the helper's near-duplicate counts differ from this side's")
        for ask in asks:
            tracker.record(ask, None)
        tracker.copies = dict(counts)
        return counts

    def scoring_round(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> SharesScoringRound:
        """Return a fresh scoring backend on this round's shares."""
        return SharesScoringRound(
            keys=self.keys,
            shape=self.shape,
            uploads=self._uploads(handles),
            round_id=round_id,
            tracker=self._tracker(round_id, scored=True),
        )


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
        claim = None if step == "ranking" else tuple(tuple(float(x) for x in r) for r in whiten)
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
        request: dict[str, object] = {"op": "open", "kind": step, "op_id": op_id}
        request.update({"tensor": tensor, **head, "round_id": self.round_id})
        reply, theirs = _call(self.keys, request, blob_h, round_id=self.round_id)
        self._expect(reply, step, op_id)
        return party.finish(theirs), party, mine, op_id  # type: ignore[arg-type]

    def _finish(self, step: str, op_id: str, opening: bytes, sums: np.ndarray) -> np.ndarray:
        meta, raw = encode_array(sums, "u8")
        head = {"op": "finish", "op_id": op_id, "round_id": self.round_id, "array": meta}
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
        return self._scores("ranking", ids, ids, np.eye(self.shape[1]), samples)

    def final_scores(
        self, ids: Sequence[str], subset: Sequence[str], whiten: np.ndarray
    ) -> dict[str, float]:
        """Open ``mean_i ||W (x_k - p̄H_i)||^2`` per id, ``p̄H`` the hidden mean of ``subset``."""
        return self._scores("final", ids, subset, whiten, self.shape[0])

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
            purpose="moments",
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
        product, _, mine, op_id = self._beaver("moments", x, y, head)
        pairs = c * (c + 1) // 2
        sums = moment_sums(product, count=h, pairs=pairs, samples=samples)
        total = self._finish("moments", op_id, mine, sums)
        flat = CODEC.decode(total, frac_bits=2 * CODEC.frac_bits) / float(h * h)
        moment = symmetric_from_pairs(flat, c)
        self.tracker.record(ask, moment)
        return moment


def _registry(plan: DeploymentPlan) -> HelperRegistry:
    """Open the helper's replay registry: the plan's file, else in memory (warned)."""
    if plan.registry_path is None:
        _log.warning("the helper's triple-label registry is in memory: a restart forgets it")
        return HelperRegistry()
    return HelperRegistry(plan.registry_path)


class SharesDeployment(SecureDeployment):
    """Enrolment secrets, the helper (party 1) and the key authority as triple dealer.

    Parameters
    ----------
    plan
        What it was deployed from.
    authority
        Deals Beaver triples; holds no shares.
    helper
        Party 1 (holds each upload's seed share and gates every opening).
    enrolments
        Each participant's secrets.
    dealer_keys
        MAC keys of the dealer's blobs (``"aggregator"``, ``"helper"``) and of the
        aggregator-helper channel (``"channel"``).
    request_key
        HMAC-SM3 key of the aggregator's signed requests to the helper (enrolled
        by :meth:`DeploymentPlan.enrol_channel`; only these two servers hold it).
    signing_key
        The aggregator's SM2 key (:meth:`DeploymentPlan.enrol_server`); the key
        authority deals triples only for requests it signed.
    """

    def __init__(
        self,
        *,
        plan: DeploymentPlan,
        authority: KeyAuthority,
        helper: HelperParty,
        enrolments: Mapping[str, SharesEnrolment],
        dealer_keys: Mapping[str, ShareMacKey],
        request_key: ChannelKey,
        signing_key: ServerSigningKey,
    ) -> None:
        super().__init__(mode=SharesMode.name, plan=plan)
        self.authority, self.helper = authority, helper
        self._request_key, self._signing_key = request_key, signing_key
        self._enrolments, self._macs = dict(enrolments), dict(dealer_keys)

    @classmethod
    def deploy(cls, plan: DeploymentPlan) -> SharesDeployment:
        """Enrol every participant, generate the MAC keys, start the helper."""
        enrolments = {p: SharesEnrolment.generate(p) for p in plan.participant_ids}
        macs = {
            "aggregator": ShareMacKey.generate(recipient="dealer-aggregator"),
            "helper": ShareMacKey.generate(recipient="dealer-helper"),
            "channel": ShareMacKey.generate(recipient="channel"),
        }
        link = plan.enrol_channel("aggregator")
        signing = plan.enrol_server("aggregator")
        helper = HelperParty(
            shape=plan.shape,
            min_participants=plan.min_participants,
            audit=plan.audit,
            secrets={p: e.helper_secret for p, e in enrolments.items()},
            dealer_key=macs["helper"],
            channel_key=macs["channel"],
            request_key=link,
            registry=_registry(plan),
            consortium=plan.consortium_pin("helper"),
        )
        authority = KeyAuthority(
            min_participants=plan.min_participants,
            audit=plan.audit,
            aggregator=signing.identity,
        )
        return cls(
            plan=plan,
            authority=authority,
            helper=helper,
            enrolments=enrolments,
            dealer_keys=macs,
            request_key=link,
            signing_key=signing,
        )

    @property
    def params(self) -> str:
        """The ring and its fixed-point resolution."""
        return "Z2^64/f12"

    def enrolment(self, participant_id: str) -> SharesEnrolment:
        """Return an enrolled participant's secrets (only that participant receives them)."""
        self.plan.require_enrolled(participant_id)
        return self._enrolments[participant_id]

    def encoder(self, participant_id: str, *, bound: float) -> SharesEncoder:
        """Build an enrolled participant's encoder."""
        return SharesEncoder(
            shape=self.shape, bound=bound, enrolment=self.enrolment(participant_id)
        )

    def _deal(self, request: bytes) -> tuple[bytes, bytes]:
        """Serve the dealer's end of the channel: deal only for a signed, fresh request."""
        return self.authority.handle_deal(
            request, key_aggregator=self._macs["aggregator"], key_helper=self._macs["helper"]
        )

    def server_keys(self) -> SharesKeys:
        """Return the aggregator's key material (no helper secret, no helper MAC key)."""
        return SharesKeys(
            secrets={p: e.aggregator_secret for p, e in self._enrolments.items()},
            helper=self.helper.handle,
            dealer=self._deal,
            range_dealer=partial(
                self.authority.handle_deal_range,
                key_aggregator=self._macs["aggregator"],
                key_helper=self._macs["helper"],
            ),
            compare_dealer=partial(
                self.authority.handle_deal_compare,
                key_aggregator=self._macs["aggregator"],
                key_helper=self._macs["helper"],
            ),
            dealer_key=self._macs["aggregator"],
            channel_key=self._macs["channel"],
            request_key=self._request_key,
            signing_key=self._signing_key,
        )

    def aggregator(self, *, bound: float) -> SharesAggregator:
        """Build party 0."""
        return SharesAggregator(
            shape=self.shape,
            bound=bound,
            keys=self.server_keys(),
            scoring=self.plan.scoring,
            min_participants=self.plan.min_participants,
        )


#: The ``shares`` mode: the helper gates every opening; the key authority deals triples.
SharesMode = AggregationMode(
    name="shares",
    insecure=False,
    central_dp=False,
    description="two additive shares (aggregator + helper), Beaver triples from the key authority",
    deploy=SharesDeployment.deploy,
)
register_mode(SharesMode)
