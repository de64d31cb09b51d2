"""``shares`` aggregation mode: two additive shares over Z_2^64, Beaver-squared scores.

Participant side (:class:`SharesEncoder`): fixed-point encode (``RING_PREDICTIONS``,
12 fractional bits, bound 8), split with a fresh PRG seed
(:func:`crypto.shares.split_with_seed`); the explicit share goes to the
aggregator tagged with HMAC-SM3, the 32-byte seed goes to the helper tagged and
sealed with SM4-GCM under a key the aggregator does not hold. The upload is
about ``8 N C`` bytes plus a few hundred (under 1 MB for 10,000 x 10).

Server side (:class:`SharesAggregator`, party 0) and :class:`HelperParty`
(party 1) run the same local steps; the key authority deals Beaver triples and
holds no shares. Openings happen only through the helper's gate: weighted sums
over at least ``min_participants``, pooled second moments, scalar scores. A
participant that drops out contributes nothing: sums run over the uploads
present. A tampered share fails its tag (``ShareTampered`` -> ``UploadMalformed``).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence

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
from secure_fed.errors import AggregationInvalid, ModeSetupInvalid, UploadMalformed
from secure_fed.secure.mode import (
    AggregateHandle,
    AggregationMode,
    SecureAggregator,
    UploadEncoder,
    UploadHandle,
    normalized_weights,
    register_mode,
)
from secure_fed.secure.modes.share_ops import (
    center_shares,
    moment_sums,
    pair_factors,
    score_plan,
    score_sums,
    weighted_share,
    whiten_shares,
)
from secure_fed.secure.parties.helper import HELPER_MAGIC, reply_array, seal_key
from secure_fed.secure.scoring.mahalanobis import (
    ScoringConfig,
    pooled_mahalanobis,
    symmetric_from_pairs,
)
from secure_fed.wire import decode_frame, encode_array, encode_frame

__all__ = ["SharesAggregator", "SharesEncoder", "SharesMode"]

_log = logging.getLogger(__name__)

UPLOAD_MAGIC = b"SFSH"
CODEC = RING_PREDICTIONS
Channel = Callable[[bytes], bytes]
Dealer = Callable[..., tuple[bytes, bytes]]


class SharesEncoder(UploadEncoder):
    """Participant side: encode, split, tag the aggregator's share, seal the helper's seed."""

    def __init__(self, *, shape: tuple[int, int], bound: float, participant_id: str | None = None,
                 secrets_by_party: Mapping[str, bytes] | None = None,
                 **_: object) -> None:  # fmt: skip
        if not participant_id or secrets_by_party is None or set(secrets_by_party) != {"aggregator", "helper"}:  # noqa: E501
            raise ModeSetupInvalid("shares encoder needs participant_id and secrets for "
                                   "'aggregator' and 'helper'")
        if bound > CODEC.clip_bound:
            raise ModeSetupInvalid(f"bound {bound} exceeds the ring codec's {CODEC.clip_bound}")
        self.shape, self.bound, self.pid = shape, bound, participant_id
        self._agg_key = ShareMacKey.derive(secrets_by_party["aggregator"], recipient="aggregator")
        self._helper_secret = secrets_by_party["helper"]

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
        bundle0 = ShareBundle.from_values(share0, label=label, party=0, frac_bits=f)
        blob0 = bundle0.to_bytes(self._agg_key)
        helper_key = ShareMacKey.derive(self._helper_secret, recipient="helper")
        bundle1 = ShareBundle.from_seed(seed, label=label, count=ring.size, frac_bits=f)
        blob1 = bundle1.to_bytes(helper_key)
        sealed = SM4GCM(seal_key(self._helper_secret)).encrypt(
            blob1, associated_data=f"{self.pid}|{uid}".encode())
        head: dict[str, object] = {"participant_id": self.pid, "upload_id": uid,
                                   "parts": [len(blob0), len(sealed)]}
        return encode_frame(UPLOAD_MAGIC, head, blob0 + sealed)


class _ShareUpload(UploadHandle):
    __slots__ = ("pid", "share", "uid")

    def __init__(self, pid: str, uid: str, share: np.ndarray) -> None:
        self.pid, self.uid, self.share = pid, uid, share


class _ShareAggregate(AggregateHandle):
    __slots__ = ("share", "uids", "weights")

    def __init__(self, uids: list[str], weights: list[float], share: np.ndarray) -> None:
        self.uids, self.weights, self.share = uids, weights, share


class SharesAggregator(SecureAggregator):
    """Party 0 of the shares mode; opens only through the helper's gate.

    Parameters
    ----------
    shape, bound
        ``(N_pub, C)`` and the public clip bound.
    secrets
        Enrolment secret per participant (shared with the aggregator).
    helper
        Bytes channel to :meth:`HelperParty.handle`.
    dealer
        ``dealer(round_id=, tensor=, count=)`` returning (aggregator blob, helper blob)
        of Beaver triples (``KeyAuthority.deal`` with the MAC keys bound).
    dealer_key, channel_key
        MAC keys of the dealer's blobs to the aggregator and of the helper channel.
    """

    def __init__(self, *, shape: tuple[int, int], bound: float,
                 secrets: Mapping[str, bytes] | None = None, helper: Channel | None = None,
                 dealer: Dealer | None = None, dealer_key: ShareMacKey | None = None,
                 channel_key: ShareMacKey | None = None, scoring: ScoringConfig | None = None,
                 round_id: int = 0, **_: object) -> None:  # fmt: skip
        if (not secrets or helper is None or dealer is None or dealer_key is None
                or channel_key is None):
            raise ModeSetupInvalid("shares aggregator needs secrets, helper, dealer, dealer_key "
                                   "and channel_key")
        self.shape, self.bound = shape, bound
        self._keys = {p: ShareMacKey.derive(s, recipient="aggregator") for p, s in secrets.items()}
        self.helper, self.dealer = helper, dealer
        self.dealer_key, self.channel_key = dealer_key, channel_key
        self.scoring = scoring or ScoringConfig()
        self.round_id = round_id
        self._handles: dict[str, _ShareUpload] = {}
        self._ops = 0

    def _call(self, header: dict[str, object], *parts: bytes) -> tuple[dict[str, object], object]:
        header = {**header, "round_id": self.round_id, "parts": [len(p) for p in parts]}
        return reply_array(self.helper(encode_frame(HELPER_MAGIC, header, b"".join(parts))))

    # -- SecureAggregator -----------------------------------------------------------

    def load(self, payload: bytes) -> UploadHandle:
        """Verify the aggregator's share tag and hand the sealed seed to the helper."""
        try:
            limit = 16 * self.shape[0] * self.shape[1] + (1 << 16)
            head, body = decode_frame(payload, UPLOAD_MAGIC, max_bytes=limit)
        except Exception as exc:
            raise UploadMalformed(f"shares upload frame refused: {exc}") from exc
        pid, uid, parts = head.get("participant_id"), head.get("upload_id"), head.get("parts")
        if pid not in self._keys or not isinstance(uid, str):
            raise UploadMalformed(f"shares upload names an unknown participant {pid!r}")
        if not isinstance(parts, list) or len(parts) != 2:
            raise UploadMalformed("shares upload needs two parts")
        if not all(isinstance(p, int) and p >= 0 for p in parts) or sum(parts) != len(body):
            raise UploadMalformed("shares upload parts do not match the payload")
        label = ShareLabel(round_id=0, participant_id=str(pid), tensor=f"pred-{uid}")
        try:
            bundle = ShareBundle.parse(body[: parts[0]], key=self._keys[str(pid)], label=label,
                                       party=0, count=self.shape[0] * self.shape[1])  # fmt: skip
        except CryptoError as exc:
            raise UploadMalformed(f"aggregator share of {pid!r} refused: {exc}") from exc
        self._call({"op": "load", "participant_id": pid, "upload_id": uid}, body[parts[0]:])
        return _ShareUpload(str(pid), uid, bundle.values().reshape(self.shape))

    def _uploads(self, handles: Mapping[str, UploadHandle]) -> dict[str, _ShareUpload]:
        for pid, h in handles.items():
            if not isinstance(h, _ShareUpload) or h.pid != pid:
                raise AggregationInvalid(f"handle of {pid!r} is not that participant's upload")
        return dict(handles)  # type: ignore[arg-type]

    def weighted_sum(self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]) -> AggregateHandle:  # noqa: E501
        """Local weighted sum of party 0's shares (weights renormalised, zeros dropped)."""
        ids, w = normalized_weights(handles, weights)
        ups = self._uploads(handles)
        share = weighted_share([ups[p].share for p in ids], w)
        return _ShareAggregate([ups[p].uid for p in ids], w, share)

    def reveal(self, aggregate: AggregateHandle) -> np.ndarray:
        """Open the aggregate with the helper's share (the helper checks the participant count)."""
        if not isinstance(aggregate, _ShareAggregate):
            raise AggregationInvalid("aggregate is not a shares aggregate")
        return self._open_linear(aggregate, "aggregate").astype(np.float32)

    def _open_linear(self, aggregate: _ShareAggregate, purpose: str) -> np.ndarray:
        _, other = self._call({"op": "linear", "purpose": purpose, "uids": aggregate.uids,
                               "weights": aggregate.weights})  # fmt: skip
        total = aggregate.share + np.asarray(other, dtype=np.uint64)
        return CODEC.decode(total, frac_bits=CODEC.frac_bits + 16)

    def score(self, handles: Mapping[str, UploadHandle], reference: AggregateHandle) -> dict[str, float]:  # noqa: E501
        """Robust pooled Mahalanobis score per upload, on shares (``reference`` unused)."""
        self._handles = self._uploads(handles)
        report = pooled_mahalanobis(self, sorted(handles), num_samples=self.shape[0],
                                    config=self.scoring)  # fmt: skip
        self.last_report = report
        return report.scores

    # -- ScoringBackend --------------------------------------------------------------

    def mean(self, ids: Sequence[str]) -> np.ndarray:
        """Open the equal-weight mean over ``ids``."""
        w = [1.0 / len(ids)] * len(ids)
        agg = _ShareAggregate([self._handles[p].uid for p in ids], w,
                              weighted_share([self._handles[p].share for p in ids], w))
        return self._open_linear(agg, "mean")

    def _beaver(self, kind: str, ids: Sequence[str], x: np.ndarray, y: np.ndarray,
                extra: dict[str, object], center: np.ndarray,
                matrix: bytes = b"") -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        self._ops += 1
        tensor, op_id = f"{kind}-{self._ops}", f"op{self._ops}"
        blob_a, blob_h = self.dealer(round_id=self.round_id, tensor=tensor, count=x.size)
        label = ShareLabel(round_id=self.round_id, participant_id="beaver", tensor=tensor)
        triples = TripleShare.parse(blob_a, key=self.dealer_key, label=label, party=0,
                                    seeded=True, count=x.size)  # fmt: skip
        party = BeaverParty(triples=triples, channel_key=self.channel_key)
        mine = party.open(x, y)
        cmeta, craw = encode_array(center)
        head = {"op": "open", "kind": kind, "op_id": op_id, "tensor": tensor, "center": cmeta,
                "uids": [self._handles[p].uid for p in ids], **extra}
        _, theirs = self._call(head, craw, matrix, blob_h)
        product = party.finish(theirs)  # type: ignore[arg-type]
        _, other = self._call({"op": "finish", "op_id": op_id}, mine)
        return product, np.asarray(other, dtype=np.uint64)

    def second_moment(self, ids: Sequence[str], samples: int, center: np.ndarray) -> np.ndarray:
        """Open the centred second moment (Beaver products, summed before opening)."""
        deltas = [center_shares(self._handles[p].share[:samples], center[:samples], party=0)
                  for p in ids]  # fmt: skip
        x, y = pair_factors(deltas)
        c = self.shape[1]
        pairs = c * (c + 1) // 2
        product, other = self._beaver("moments", ids, x, y, {"samples": samples}, center)
        mine = moment_sums(product, count=len(ids), pairs=pairs, samples=samples)
        flat = CODEC.decode(mine + other, frac_bits=2 * CODEC.frac_bits)
        return symmetric_from_pairs(flat, c)

    def scores(self, ids: Sequence[str], center: np.ndarray, whiten: np.ndarray,
               samples: int | None = None) -> dict[str, float]:  # fmt: skip
        """Per-participant ``mean_{i<samples} ||W (p_i - c_i)||^2``; only scalars are opened."""
        rows = self.shape[0] if samples is None else samples
        plan = score_plan(whiten, n_samples=rows)
        z = np.concatenate([whiten_shares(center_shares(self._handles[p].share[:rows],
                                                        center[:rows], party=0),
                                          plan, party=0).reshape(-1) for p in ids])  # fmt: skip
        mmeta, mraw = encode_array(plan.matrix, "u8")
        product, other = self._beaver("score", ids, z, z, {"g": plan.g, "fz": plan.fz,
                                                           "matrix": mmeta, "samples": rows},
                                      center, mraw)  # fmt: skip
        sums = CODEC.decode(score_sums(product, count=len(ids)) + other, frac_bits=2 * plan.fz)
        return {p: float(s) / rows for p, s in zip(ids, sums, strict=True)}


#: The ``shares`` mode; factories need the enrolment secrets, helper and dealer channels.
SharesMode = AggregationMode(
    name="shares",
    insecure=False,
    description="two additive shares (aggregator + helper), Beaver triples from the key authority",
    encoder=SharesEncoder,
    aggregator=SharesAggregator,
)
register_mode(SharesMode)
