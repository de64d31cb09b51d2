"""The shares-mode helper: holds party 1's share of every upload (a 32-byte PRG seed).

ARCHITECTURE.md section 2: the helper may learn what the aggregator learns and
nothing more. It receives each participant's seed sealed with SM4-GCM under a
key it shares with that participant (forwarded by the aggregator, which cannot
read it), verifies the HMAC-SM3 tag of the share frame, and then runs the same
local steps as the aggregator (:mod:`secure_fed.secure.modes.share_ops`) on its own shares.

It is also the gatekeeper of openings: it releases its share of a result only
when the result is a linear combination over at least ``min_participants``
uploads with positive weights, a pooled second moment over at least that many,
or one scalar score per participant. Every release is a row of :attr:`log` and
a ``decryption.released`` audit event (``party: helper``); refusals raise
:class:`~secure_fed.errors.OpeningRefused`. Beaver openings (``x - a``) are
uniformly masked and reveal nothing (Beaver, CRYPTO 1991).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import BeaverParty, ShareBundle, ShareLabel, ShareMacKey, TripleShare
from crypto.sm import SM4GCM
from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused, UploadMalformed
from secure_fed.secure.modes.share_ops import (
    CODEC,
    ScorePlan,
    center_shares,
    moment_sums,
    pair_factors,
    score_sums,
    weighted_share,
    whiten_shares,
)
from secure_fed.secure.parties.key_authority import DecryptionRecord
from secure_fed.secure.scoring.outlier import AuditSink
from secure_fed.wire import decode_array, decode_frame, encode_array, encode_frame

__all__ = ["HELPER_MAGIC", "HelperParty", "seal_key", "split_parts"]

_log = logging.getLogger(__name__)

HELPER_MAGIC = b"SFHR"
REPLY_MAGIC = b"SFHA"


def seal_key(secret: bytes) -> bytes:
    """SM4 key a participant and the helper derive from their enrolment secret."""
    return hmac.new(secret, b"secure-fed/shares/seed-seal/v1", "sm3").digest()[:16]


def split_parts(header: Mapping[str, object], payload: bytes) -> list[bytes]:
    """Split ``payload`` by ``header["parts"]`` (a list of byte lengths)."""
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
    kind: str
    uids: list[str]
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
    """

    shape: tuple[int, int]
    min_participants: int
    secrets: dict[str, bytes]
    dealer_key: ShareMacKey
    channel_key: ShareMacKey
    audit: AuditSink | None = None
    log: list[DecryptionRecord] = field(default_factory=list)
    _seeds: dict[str, tuple[str, ShareBundle]] = field(default_factory=dict, repr=False)
    _pending: dict[str, _Pending] = field(default_factory=dict, repr=False)

    def handle(self, request: bytes) -> bytes:
        """Serve one aggregator request.

        Raises
        ------
        AuthorityRequestMalformed, UploadMalformed, OpeningRefused
        """
        header, payload = decode_frame(request, HELPER_MAGIC, max_bytes=1 << 31)
        op = header.get("op")
        ops = {"load": self._load, "linear": self._linear, "open": self._open,
               "finish": self._finish}
        if op not in ops:
            raise AuthorityRequestMalformed(f"helper op {op!r} is unknown; allowed: {sorted(ops)}")
        reply_header, reply = ops[str(op)](header, payload)
        return encode_frame(REPLY_MAGIC, reply_header, reply)

    # -- uploads --------------------------------------------------------------------

    def _load(self, header: dict[str, object], payload: bytes) -> tuple[dict[str, object], bytes]:
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
            blob = SM4GCM(seal_key(secret)).decrypt(payload,
                                                    associated_data=f"{pid}|{uid}".encode())
            bundle = ShareBundle.parse(blob, key=ShareMacKey.derive(secret, recipient="helper"),
                                       label=label, party=1, seeded=True,
                                       count=self.shape[0] * self.shape[1])  # fmt: skip
        except CryptoError as exc:
            raise UploadMalformed(f"helper share of {pid!r} refused: {exc}") from exc
        self._seeds[uid] = (pid, bundle)
        return {"ok": True}, b""

    def _shares(self, raw: object) -> tuple[list[str], list[np.ndarray]]:
        if not isinstance(raw, list) or not all(isinstance(u, str) for u in raw):
            raise AuthorityRequestMalformed("request needs a list of upload ids")
        uids = [str(u) for u in raw]
        missing = [u for u in uids if u not in self._seeds]
        if missing:
            raise AuthorityRequestMalformed(f"helper holds no share of uploads {missing}")
        return uids, [self._seeds[u][1].values().reshape(self.shape) for u in uids]

    def _who(self, uids: list[str]) -> list[str]:
        return [self._seeds[u][0] for u in uids]

    def _guard(self, kind: str, uids: list[str], round_id: int) -> None:
        who = set(self._who(uids))
        if len(who) < self.min_participants or len(who) != len(uids):
            self.log.append(DecryptionRecord(round_id, kind, "refused", (), len(who),
                                             tuple(sorted(who)), False, time.time()))  # fmt: skip
            if self.audit is not None:
                self.audit.record("access.denied", {"party": "helper", "purpose": kind,
                                                    "contributors": len(who)})
            raise OpeningRefused(f"{kind} over {len(who)} distinct participants; "
                                 f"at least {self.min_participants} needed")

    def _release(self, kind: str, uids: list[str], round_id: int, shape: tuple[int, ...],
                 contributors: int) -> None:  # fmt: skip
        ids = tuple(self._who(uids))
        self.log.append(DecryptionRecord(round_id, kind, "score" if kind == "score" else
                                         "aggregate", shape, contributors, ids, True,
                                         time.time()))  # fmt: skip
        if self.audit is not None:
            self.audit.record("decryption.released", {"party": "helper", "purpose": kind,
                                                      "round_id": round_id, "shape": list(shape),
                                                      "contributors": contributors,
                                                      "participant_ids": list(ids)})

    # -- linear openings ----------------------------------------------------------------

    def _linear(self, header: dict[str, object], payload: bytes) -> tuple[dict[str, object], bytes]:
        weights = header.get("weights")
        purpose, round_id = str(header.get("purpose", "aggregate")), _int(header, "round_id")
        uids, shares = self._shares(header.get("uids"))
        if (not isinstance(weights, list) or len(weights) != len(shares)
                or not all(isinstance(w, int | float) and 0 < w <= 1 for w in weights)):
            raise OpeningRefused("linear openings need one weight in (0, 1] per upload")
        self._guard(purpose, uids, round_id)
        out = weighted_share(shares, [float(w) for w in weights])
        self._release(purpose, uids, round_id, out.shape, len(shares))
        meta, raw = encode_array(out, "u8")
        return {"array": meta}, raw

    # -- Beaver products: moments and scores -------------------------------------------

    def _open(self, header: dict[str, object], payload: bytes) -> tuple[dict[str, object], bytes]:
        kind, op_id = header.get("kind"), str(header.get("op_id"))
        round_id = _int(header, "round_id")
        uids, shares = self._shares(header.get("uids"))
        center_raw, matrix_raw, triples = split_parts(header, payload)
        center = decode_array(header.get("center"), center_raw)
        if kind == "moments":
            self._guard("moments", uids, round_id)
            samples = _int(header, "samples")
            deltas = [center_shares(s[:samples], center[:samples], party=1) for s in shares]
            x, y = pair_factors(deltas)
            meta = {"samples": samples, "pairs": deltas[0].shape[1] * (deltas[0].shape[1] + 1) // 2}
        elif kind == "score":
            g, fz, rows = _int(header, "g"), _int(header, "fz"), _int(header, "samples")
            plan = ScorePlan(matrix=decode_array(header.get("matrix"), matrix_raw), g=g, fz=fz)
            z = np.concatenate([whiten_shares(center_shares(s[:rows], center[:rows], party=1),
                                              plan, party=1).reshape(-1) for s in shares])
            x, y, meta = z, z, {"fz": fz}
        else:
            raise AuthorityRequestMalformed(
                f"Beaver kind {kind!r} is unknown; allowed: moments, score")
        label = ShareLabel(round_id=round_id, participant_id="beaver",
                           tensor=str(header.get("tensor")))
        try:
            triple = TripleShare.parse(triples, key=self.dealer_key, label=label, party=1,
                                       count=x.size)
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"triples refused: {exc}") from exc
        party = BeaverParty(triples=triple, channel_key=self.channel_key)
        message = party.open(x, y)
        self._pending[op_id] = _Pending(party, str(kind), uids, meta)
        return {"op_id": op_id}, message

    def _finish(self, header: dict[str, object], payload: bytes) -> tuple[dict[str, object], bytes]:
        op_id, round_id = str(header.get("op_id")), _int(header, "round_id")
        pending = self._pending.pop(op_id, None)
        if pending is None:
            raise AuthorityRequestMalformed(f"no open Beaver operation {op_id!r}")
        try:
            product = pending.party.finish(payload)
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"aggregator opening refused: {exc}") from exc
        count = len(pending.uids)
        if pending.kind == "moments":
            out = moment_sums(product, count=count, pairs=pending.meta["pairs"],
                              samples=pending.meta["samples"])  # fmt: skip
            self._release("moments", pending.uids, round_id, out.shape, count)
        else:
            out = score_sums(product, count=count)
            for uid in pending.uids:
                self._release("score", [uid], round_id, (1,), 1)
        meta, raw = encode_array(out, "u8")
        return {"array": meta}, raw


def _int(header: Mapping[str, object], name: str) -> int:
    value = header.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise AuthorityRequestMalformed(f"request field {name!r} must be an integer >= 0")
    return value


def reply_array(reply: bytes) -> tuple[dict[str, object], np.ndarray | bytes]:
    """Parse a helper reply: ``(header, array or raw bytes)``."""
    header, payload = decode_frame(reply, REPLY_MAGIC, max_bytes=1 << 31)
    if "array" in header:
        return header, decode_array(header["array"], payload)
    return header, payload


_ = (json, CODEC)
