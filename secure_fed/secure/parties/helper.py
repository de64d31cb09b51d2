"""The shares-mode helper: holds party 1's share of every upload (a 32-byte PRG seed).

The helper may learn what the aggregator learns and nothing more. It receives
each participant's seed sealed with SM4-GCM under a key it shares with that
participant (forwarded by the aggregator, which cannot read it), verifies the
HMAC-SM3 tag of the share frame, and then runs the same local steps as the
aggregator (:mod:`secure_fed.secure.modes.share_ops`) on its own shares.

It is also a gatekeeper of openings, under the same
:class:`~secure_fed.secure.release_policy.ReleasePolicy` as the key authority:
it releases its share of a linear combination or of pooled second moments only
over at least ``min_participants`` distinct participants, and of scores only
one scalar per upload. It names the contributors itself, from the uploads it
holds, never from labels in the request: two uploads of one participant count
once and are refused. Every release is a row of :attr:`HelperParty.log` and a
``decryption.released`` audit event (``party: helper``); refusals raise
:class:`~secure_fed.errors.OpeningRefused` with an ``access.denied`` event.
Beaver openings (``x - a``) are uniformly masked and reveal nothing (Beaver,
CRYPTO 1991). Requests and replies are ``helper_request`` / ``helper_reply``
frames of :mod:`secure_fed.wire`.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import BeaverParty, ShareBundle, ShareLabel, ShareMacKey, TripleShare
from crypto.sm import SM4GCM
from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused, UploadMalformed
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.modes.share_ops import (
    ScorePlan,
    center_shares,
    moment_sums,
    pair_factors,
    score_sums,
    weighted_share,
    whiten_shares,
)
from secure_fed.secure.modes.share_range import HelperRangeChecks
from secure_fed.secure.release_policy import (
    DecryptionRecord,
    ReleasePolicy,
    ReleaseRequest,
    ReleaseRule,
)
from secure_fed.wire import (
    HELPER_REPLY,
    HELPER_REQUEST,
    decode_array,
    decode_frame,
    encode_array,
    encode_frame,
    number_from_wire,
)

__all__ = ["HelperParty", "reply_array", "seal_key", "split_parts"]

_log = logging.getLogger(__name__)

Reply = tuple[dict[str, object], bytes]
#: Purposes a linear opening may carry (both are aggregates over the uploads named).
LINEAR_PURPOSES = ("aggregate", "mean")


def seal_key(secret: bytes) -> bytes:
    """SM4 key a participant and the helper derive from their enrolment secret."""
    return hmac.new(secret, b"secure-fed/shares/seed-seal/v1", "sm3").digest()[:16]


def split_parts(header: Mapping[str, object], payload: bytes) -> list[bytes]:
    """Split ``payload`` by ``header["parts"]`` (a list of byte lengths).

    Raises
    ------
    AuthorityRequestMalformed
        If the lengths are missing, negative or do not add up to the payload.
    """
    sizes = header.get("parts")
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        raise AuthorityRequestMalformed("request needs a 'parts' list of byte lengths")
    if sum(sizes) != len(payload):
        raise AuthorityRequestMalformed("request parts do not add up to the payload length")
    out, pos = [], 0
    for s in sizes:
        out.append(payload[pos : pos + s])
        pos += s
    return out


@dataclass
class _Pending:
    party: BeaverParty
    asks: list[ReleaseRequest]
    meta: dict[str, int]


@dataclass
class HelperParty:
    """Party 1 of the shares mode; talks to the aggregator in bytes (:meth:`handle`).

    Parameters
    ----------
    shape
        ``(N_pub, C)`` of every upload.
    min_participants
        Smallest participant set whose aggregate the helper helps open (>= 2).
    secrets
        Enrolment secret per participant id (shared with that participant only).
    dealer_key
        MAC key of the key authority's triple blobs to the helper.
    channel_key
        MAC key of the aggregator-helper channel (Beaver openings).
    audit
        Sink of ``decryption.released`` and ``access.denied`` events.
    release_rules
        Extra release rules (a round's release plan), after the built-in ones.
    """

    shape: tuple[int, int]
    min_participants: int
    secrets: dict[str, bytes]
    dealer_key: ShareMacKey
    channel_key: ShareMacKey
    audit: AuditSink | None = None
    release_rules: tuple[ReleaseRule, ...] = ()
    log: list[DecryptionRecord] = field(default_factory=list)
    policy: ReleasePolicy = field(init=False, repr=False)
    _seeds: dict[str, tuple[str, ShareBundle]] = field(default_factory=dict, repr=False)
    _pending: dict[str, _Pending] = field(default_factory=dict, repr=False)
    range_checks: HelperRangeChecks = field(default_factory=HelperRangeChecks, repr=False)

    def __post_init__(self) -> None:
        self.policy = ReleasePolicy(
            party="helper",
            min_participants=self.min_participants,
            refusal=OpeningRefused,
            audit=self.audit,
            log=self.log,
            rules=self.release_rules,
        )

    def handle(self, request: bytes) -> bytes:
        """Serve one aggregator request.

        Raises
        ------
        AuthorityRequestMalformed, UploadMalformed, OpeningRefused
            On a malformed frame, a refused seed, or an opening the policy refuses.
        """
        header, payload = decode_frame(request, HELPER_REQUEST)
        ops: dict[str, Callable[[dict[str, object], bytes], Reply]] = {
            "load": self._load,
            "range": lambda h, p: self.range_checks.handle(
                h, p, seeds=self._seeds, dealer_key=self.dealer_key, channel_key=self.channel_key
            ),
            "linear": self._linear,
            "open": self._open,
            "finish": self._finish,
        }
        op = header.get("op")
        if not isinstance(op, str) or op not in ops:
            raise AuthorityRequestMalformed(f"helper op {op!r} is unknown; allowed: {sorted(ops)}")
        reply_header, reply = ops[op](header, payload)
        return encode_frame(HELPER_REPLY, reply_header, reply)

    # -- uploads --------------------------------------------------------------------

    def _load(self, header: dict[str, object], payload: bytes) -> Reply:
        pid, uid = header.get("participant_id"), header.get("upload_id")
        if not isinstance(pid, str) or not isinstance(uid, str) or pid not in self.secrets:
            raise UploadMalformed(f"helper does not know participant {pid!r}")
        if uid in self._seeds:
            if self._seeds[uid][0] != pid:
                raise UploadMalformed(f"upload id {uid} was already used by another participant")
            return {"ok": True}, b""  # idempotent reload after a restart
        secret = self.secrets[pid]
        label = ShareLabel(round_id=0, participant_id=pid, tensor=f"pred-{uid}")
        try:
            blob = SM4GCM(seal_key(secret)).decrypt(
                payload, associated_data=f"{pid}|{uid}".encode()
            )
            bundle = ShareBundle.parse(
                blob,
                key=ShareMacKey.derive(secret, recipient="helper"),
                label=label,
                party=1,
                seeded=True,
                count=self.shape[0] * self.shape[1],
            )
        except CryptoError as exc:
            raise UploadMalformed(f"helper share of {pid!r} refused: {exc}") from exc
        self._seeds[uid] = (pid, bundle)
        return {"ok": True}, b""

    def _shares(self, raw: object) -> tuple[list[str], list[np.ndarray]]:
        if not isinstance(raw, list) or not raw or not all(isinstance(u, str) for u in raw):
            raise AuthorityRequestMalformed("request needs a non-empty list of upload ids")
        uids = [str(u) for u in raw]
        missing = [u for u in uids if u not in self._seeds]
        if missing:
            raise AuthorityRequestMalformed(f"helper holds no share of uploads {missing}")
        self.range_checks.require_passed(uids)
        return uids, [self._seeds[u][1].values().reshape(self.shape) for u in uids]

    def _ask(
        self, purpose: str, uids: list[str], round_id: int, weights: tuple[float, ...] | None = None
    ) -> ReleaseRequest:
        """Build the policy's view: contributors named from the uploads the helper holds."""
        score = purpose == "score"
        return ReleaseRequest(
            round_id=round_id,
            purpose=purpose,
            contributors=tuple(self._seeds[u][0] for u in uids),
            value_kind="score" if score else "aggregate",
            shape=(1,) if score else (),
            weights=weights,
        )

    # -- linear openings ----------------------------------------------------------------

    def _linear(self, header: dict[str, object], payload: bytes) -> Reply:
        purpose, round_id = header.get("purpose", "aggregate"), _int(header, "round_id")
        if purpose not in LINEAR_PURPOSES:
            raise AuthorityRequestMalformed(
                f"linear purpose {purpose!r} is unknown; allowed: {list(LINEAR_PURPOSES)}"
            )
        uids, shares = self._shares(header.get("uids"))
        weights = _weights(header.get("weights"))
        ask = self._ask(str(purpose), uids, round_id, weights=weights)
        self.policy.check(ask)
        out = weighted_share(shares, list(weights))
        self.policy.released(replace(ask, shape=out.shape))
        meta, data = encode_array(out, "u8")
        return {"array": meta}, data

    # -- Beaver products: moments and scores -------------------------------------------

    def _open(self, header: dict[str, object], payload: bytes) -> Reply:
        kind, op_id = header.get("kind"), str(header.get("op_id"))
        round_id = _int(header, "round_id")
        uids, shares = self._shares(header.get("uids"))
        if kind == "moments":
            asks = [self._ask("moments", uids, round_id)]
        elif kind == "score":
            asks = [self._ask("score", [u], round_id) for u in uids]
        else:
            raise AuthorityRequestMalformed(
                f"Beaver kind {kind!r} is unknown; allowed: moments, score"
            )
        for ask in asks:
            self.policy.check(ask)
        center_raw, matrix_raw, triples = split_parts(header, payload)
        center = decode_array(header.get("center"), center_raw)
        if kind == "moments":
            x, y, meta = _moment_factors(header, shares, center)
        else:
            x, y, meta = _score_factors(header, shares, center, matrix_raw)
        party, message = self._beaver(header, round_id, x, y, triples)
        self._pending[op_id] = _Pending(party, asks, meta)
        return {"op_id": op_id}, message

    def _beaver(
        self, header: dict[str, object], round_id: int, x: np.ndarray, y: np.ndarray, triples: bytes
    ) -> tuple[BeaverParty, bytes]:
        label = ShareLabel(
            round_id=round_id, participant_id="beaver", tensor=str(header.get("tensor"))
        )
        try:
            triple = TripleShare.parse(
                triples, key=self.dealer_key, label=label, party=1, count=x.size
            )
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"triples refused: {exc}") from exc
        party = BeaverParty(triples=triple, channel_key=self.channel_key)
        return party, party.open(x, y)

    def _finish(self, header: dict[str, object], payload: bytes) -> Reply:
        op_id, round_id = str(header.get("op_id")), _int(header, "round_id")
        pending = self._pending.get(op_id)
        if pending is None:
            raise AuthorityRequestMalformed(f"no open Beaver operation {op_id!r}")
        if pending.asks[0].round_id != round_id:
            raise AuthorityRequestMalformed(f"operation {op_id!r} belongs to another round")
        del self._pending[op_id]
        try:
            product = pending.party.finish(payload)
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"aggregator opening refused: {exc}") from exc
        count = sum(len(a.contributors) for a in pending.asks)
        if pending.asks[0].purpose == "moments":
            m = pending.meta
            out = moment_sums(product, count=count, pairs=m["pairs"], samples=m["samples"])
            self.policy.released(replace(pending.asks[0], shape=out.shape))
        else:
            out = score_sums(product, count=count)
            for ask in pending.asks:
                self.policy.released(ask)
        meta, data = encode_array(out, "u8")
        return {"array": meta}, data


Factors = tuple[np.ndarray, np.ndarray, dict[str, int]]


def _moment_factors(
    header: dict[str, object], shares: list[np.ndarray], center: np.ndarray
) -> Factors:
    samples = _int(header, "samples")
    deltas = [center_shares(s[:samples], center[:samples], party=1) for s in shares]
    x, y = pair_factors(deltas)
    classes = deltas[0].shape[1]
    return x, y, {"samples": samples, "pairs": classes * (classes + 1) // 2}


def _score_factors(
    header: dict[str, object], shares: list[np.ndarray], center: np.ndarray, matrix: bytes
) -> Factors:
    g, fz, rows = _int(header, "g"), _int(header, "fz"), _int(header, "samples")
    plan = ScorePlan(matrix=decode_array(header.get("matrix"), matrix), g=g, fz=fz)
    centered = [center_shares(s[:rows], center[:rows], party=1) for s in shares]
    z = np.concatenate([whiten_shares(c, plan, party=1).reshape(-1) for c in centered])
    return z, z, {"fz": fz}


def _weights(raw: object) -> tuple[float, ...]:
    numbers = [number_from_wire(w) for w in raw] if isinstance(raw, list) else [None]
    if not all(w is not None for w in numbers):
        raise AuthorityRequestMalformed("linear openings need a list of numeric weights")
    return tuple(float(w) for w in numbers if w is not None)


def _int(header: Mapping[str, object], name: str) -> int:
    value = header.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AuthorityRequestMalformed(f"request field {name!r} must be an integer >= 0")
    return value


def reply_array(reply: bytes) -> tuple[dict[str, object], np.ndarray | bytes]:
    """Parse a helper reply: ``(header, array or raw bytes)``.

    Raises
    ------
    AuthorityRequestMalformed
        On a malformed reply frame or array.
    """
    header, payload = decode_frame(reply, HELPER_REPLY)
    if "array" in header:
        return header, decode_array(header["array"], payload)
    return header, payload
