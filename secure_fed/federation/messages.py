"""Participant <-> aggregator messages: the upload header and the publication.

Both are frames of :mod:`secure_fed.wire` (the one table of message kinds):

* ``upload`` (``SFUP``): header = :class:`UploadHeader` as canonical JSON with
  exactly its keys; payload = the mode's bytes (``secure_fed.secure.mode``).
  The header binds round id, schema hash, nonce and the payload's SM3 digest;
  the signed envelope (:mod:`secure_fed.federation.envelope`) signs the header
  and the upload digest, so one SM2 signature covers all of them.
* ``publication`` (``SFPB``): header = round id, final weights (exact decimal
  strings), excluded ids; payload = a ``matrix`` frame of the aggregate.

Untrusted bytes are size-checked before parsing; every defect raises
:class:`~secure_fed.errors.UploadMalformed`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from crypto.sm.sm3 import sm3_digest
from secure_fed.errors import SchemaInvalid, UploadMalformed
from secure_fed.federation.schema import ModelSchema
from secure_fed.wire import (
    PUBLICATION,
    SHARES_UPLOAD,
    UPLOAD,
    decode_frame,
    decode_matrix,
    encode_frame,
    encode_matrix,
    number_from_wire,
)

__all__ = [
    "Publication",
    "UploadHeader",
    "decode_publication",
    "decode_upload",
    "encode_publication",
    "encode_upload",
    "payload_ids",
    "training_label",
]

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_HEADER_KEYS = {
    "round_id",
    "participant_id",
    "mode",
    "schema",
    "schema_hash",
    "num_samples",
    "nonce",
    "payload_sm3",
}


@dataclass(frozen=True, kw_only=True)
class UploadHeader:
    """Header of one participant's upload.

    Parameters
    ----------
    round_id
        Round the upload belongs to (>= 0).
    participant_id
        Sender id (1-64 of ``[A-Za-z0-9_.-]``).
    mode
        Aggregation mode name of the payload.
    schema
        The sender's declared model schema.
    schema_hash
        Hex SM3 of the round contract (``RoundSchema.schema_hash``).
    num_samples
        Public weight: the sender's private sample count (>= 1).
    nonce
        32 hex characters (16 random bytes), unique per upload.
    payload_sm3
        Hex SM3 digest of the payload bytes.
    """

    round_id: int
    participant_id: str
    mode: str
    schema: ModelSchema
    schema_hash: str
    num_samples: int
    nonce: str
    payload_sm3: str

    def __post_init__(self) -> None:
        if isinstance(self.round_id, bool) or not isinstance(self.round_id, int):
            raise UploadMalformed(f"header.round_id must be an integer, got {self.round_id!r}")
        if self.round_id < 0:
            raise UploadMalformed(f"header.round_id must be >= 0, got {self.round_id}")
        if not isinstance(self.participant_id, str) or not _PID.match(self.participant_id):
            raise UploadMalformed(f"header.participant_id is invalid: {self.participant_id!r}")
        if not isinstance(self.mode, str) or not 0 < len(self.mode) <= 32:
            raise UploadMalformed(f"header.mode is invalid: {self.mode!r}")
        for name, pattern in (("schema_hash", _HEX64), ("nonce", _HEX32), ("payload_sm3", _HEX64)):
            value = getattr(self, name)
            if not isinstance(value, str) or not pattern.match(value):
                raise UploadMalformed(f"header.{name} must be lowercase hex, got {value!r}")
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int):
            raise UploadMalformed(f"header.num_samples must be an integer: {self.num_samples!r}")
        if not 1 <= self.num_samples <= 10**9:
            raise UploadMalformed(f"header.num_samples must be in [1, 1e9], got {self.num_samples}")

    def to_dict(self) -> dict[str, object]:
        """Return the JSON-ready header."""
        return {
            "round_id": self.round_id,
            "participant_id": self.participant_id,
            "mode": self.mode,
            "schema": self.schema.to_dict(),
            "schema_hash": self.schema_hash,
            "num_samples": self.num_samples,
            "nonce": self.nonce,
            "payload_sm3": self.payload_sm3,
        }

    @classmethod
    def from_dict(cls, data: object) -> UploadHeader:
        """Parse a header dict, raising :class:`UploadMalformed` on any defect."""
        if not isinstance(data, dict) or set(data) != _HEADER_KEYS:
            raise UploadMalformed(f"upload header needs exactly the keys {sorted(_HEADER_KEYS)}")
        try:
            schema = ModelSchema.from_dict(data["schema"])
        except SchemaInvalid as exc:
            raise UploadMalformed(f"upload header schema is malformed: {exc.message}") from exc
        fields = {k: v for k, v in data.items() if k != "schema"}
        return cls(schema=schema, **fields)


def encode_upload(header: UploadHeader, payload: bytes) -> bytes:
    """Frame ``header`` and ``payload`` as upload bytes.

    Raises
    ------
    UploadMalformed
        If ``header.payload_sm3`` is not the SM3 digest of ``payload``.
    """
    if sm3_digest(payload).hex() != header.payload_sm3:
        raise UploadMalformed("header.payload_sm3 does not match the payload")
    return encode_frame(UPLOAD, header.to_dict(), payload)


def decode_upload(data: bytes, *, max_bytes: int) -> tuple[UploadHeader, bytes]:
    """Parse upload bytes into ``(header, payload)`` after size and framing checks.

    Raises
    ------
    UploadMalformed
        On size, framing, header or payload-digest defects.
    """
    raw, payload = decode_frame(data, UPLOAD, max_bytes=max_bytes)
    header = UploadHeader.from_dict(raw)
    if sm3_digest(payload).hex() != header.payload_sm3:
        raise UploadMalformed("upload payload does not match header.payload_sm3")
    return header, payload


def training_label(round_id: int) -> str:
    """Return the ledger round label of a round's private training (``r<round_id>``).

    The participant reserves its DP-SGD charge under this label, and the
    aggregator asks for a budget receipt of exactly this label.
    """
    return f"r{round_id}"


def payload_ids(payload: bytes) -> tuple[str | None, str | None]:
    """Return the ``(participant_id, upload_id)`` a mode payload names itself, if any.

    Shares payloads (``SFSH``) carry both in their header, and the helper
    stores the sealed seed under them; plaintext matrices and CKKS ciphertexts
    name nobody, so ``(None, None)``. Only the header is read: the payload is
    not validated here (the mode's ``load`` does that).

    Raises
    ------
    UploadMalformed
        If a shares frame is malformed or its ids are not strings.
    """
    if not payload.startswith(SHARES_UPLOAD.magic):
        return None, None
    head, _ = decode_frame(payload, SHARES_UPLOAD, max_bytes=len(payload))
    pid, uid = head.get("participant_id"), head.get("upload_id")
    if not isinstance(pid, str) or not isinstance(uid, str):
        raise UploadMalformed("shares payload needs string participant_id and upload_id")
    return pid, uid


@dataclass(frozen=True, kw_only=True)
class Publication:
    """What the aggregator publishes after a round.

    Parameters
    ----------
    round_id
        The round.
    aggregate
        ``[N_pub, C]`` float32 aggregate (same representation as the uploads).
    weights
        Final public weight per accepted participant (sums to 1).
    excluded
        Participants whose uploads were dropped by the filter.
    """

    round_id: int
    aggregate: np.ndarray
    weights: dict[str, float]
    excluded: tuple[str, ...] = ()


def encode_publication(pub: Publication) -> bytes:
    """Frame a :class:`Publication` as bytes (weights as exact decimal strings)."""
    header = {"round_id": pub.round_id, "weights": pub.weights, "excluded": list(pub.excluded)}
    return encode_frame(PUBLICATION, header, encode_matrix(pub.aggregate))


def decode_publication(
    data: bytes, *, max_bytes: int, shape: tuple[int, int] | None = None
) -> Publication:
    """Parse publication bytes (participant side).

    Raises
    ------
    UploadMalformed
        On any framing, header or matrix defect.
    """
    raw, payload = decode_frame(data, PUBLICATION, max_bytes=max_bytes)
    round_id, weights, excluded = raw.get("round_id"), raw.get("weights"), raw.get("excluded")
    if isinstance(round_id, bool) or not isinstance(round_id, int) or not isinstance(weights, dict):
        raise UploadMalformed("publication header needs an integer round_id and a weights object")
    if not isinstance(excluded, list) or not all(isinstance(e, str) for e in excluded):
        raise UploadMalformed("publication header 'excluded' must be a list of ids")
    values = {str(k): number_from_wire(v) for k, v in weights.items()}
    parsed = {k: v for k, v in values.items() if v is not None}
    if len(parsed) != len(values):
        raise UploadMalformed("publication weights must be numbers (decimal strings)")
    return Publication(
        round_id=round_id,
        aggregate=decode_matrix(payload, shape=shape),
        weights=parsed,
        excluded=tuple(excluded),
    )
