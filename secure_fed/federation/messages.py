"""Byte messages between participants and the aggregator, with explicit schemas.

Every message that crosses a party boundary is ``bytes`` in one of the frames
below, so the services issue can move each party into its own process without
touching the protocol code. Untrusted bytes are size-checked before parsing.

Frames (all integers big-endian)::

    upload      = b"SFUP" | u8 version=1 | u32 header_len | header JSON | u64 payload_len | payload
    publication = b"SFPB" | u8 version=1 | u32 header_len | header JSON | matrix
    matrix      = b"SFMX" | u32 rows | u32 cols | rows*cols float32 little-endian

The upload header is canonical JSON (sorted keys, no spaces) with exactly the
keys of :class:`UploadHeader`; the payload is mode-specific
(``secure_fed.secure.mode``). A later issue adds an SM2 signature over the SM3
digest of the canonical header and ``payload_sm3``; the header already carries
everything that signature must bind (round id, schema hash, nonce).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass

import numpy as np

from crypto.sm.sm3 import sm3_digest
from secure_fed.errors import SchemaInvalid, UploadMalformed
from secure_fed.federation.schema import ModelSchema

__all__ = [
    "Publication",
    "UploadHeader",
    "decode_matrix",
    "decode_publication",
    "decode_upload",
    "encode_matrix",
    "encode_publication",
    "encode_upload",
]

_UPLOAD_MAGIC = b"SFUP"
_PUB_MAGIC = b"SFPB"
_MATRIX_MAGIC = b"SFMX"
_VERSION = 1
_MAX_HEADER = 64 * 1024
_MAX_MATRIX_ELEMENTS = 50_000_000
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_PID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_HEADER_KEYS = {
    "round_id", "participant_id", "mode", "schema", "schema_hash", "num_samples", "nonce",
    "payload_sm3",
}  # fmt: skip


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


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
    head = _canonical(header.to_dict())
    return b"".join(
        (_UPLOAD_MAGIC, struct.pack(">BI", _VERSION, len(head)), head,
         struct.pack(">Q", len(payload)), payload)
    )  # fmt: skip


def _split_frame(data: bytes, magic: bytes, *, max_bytes: int, what: str) -> tuple[dict[str, object], bytes]:  # noqa: E501
    if not isinstance(data, bytes | bytearray | memoryview):
        raise UploadMalformed(f"{what} must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > max_bytes:
        raise UploadMalformed(f"{what} is {len(data)} bytes, over the limit of {max_bytes}")
    if len(data) < 9 or data[:4] != magic:
        raise UploadMalformed(f"{what} does not start with the {magic!r} frame")
    version, head_len = struct.unpack(">BI", data[4:9])
    if version != _VERSION:
        raise UploadMalformed(f"{what} frame version {version} is not supported")
    if head_len > _MAX_HEADER or 9 + head_len > len(data):
        raise UploadMalformed(f"{what} header length {head_len} is out of range")
    try:
        header = json.loads(data[9 : 9 + head_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UploadMalformed(f"{what} header is not UTF-8 JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise UploadMalformed(f"{what} header must be a JSON object")
    return header, data[9 + head_len :]


def decode_upload(data: bytes, *, max_bytes: int) -> tuple[UploadHeader, bytes]:
    """Parse upload bytes into ``(header, payload)`` after size and framing checks.

    Raises
    ------
    UploadMalformed
        On size, framing, header or payload-digest defects.
    """
    raw, rest = _split_frame(data, _UPLOAD_MAGIC, max_bytes=max_bytes, what="upload")
    header = UploadHeader.from_dict(raw)
    if len(rest) < 8:
        raise UploadMalformed("upload is truncated before the payload length")
    (payload_len,) = struct.unpack(">Q", rest[:8])
    payload = rest[8:]
    if payload_len != len(payload):
        raise UploadMalformed(f"upload payload is {len(payload)} bytes, header says {payload_len}")
    if sm3_digest(payload).hex() != header.payload_sm3:
        raise UploadMalformed("upload payload does not match header.payload_sm3")
    return header, payload


def encode_matrix(matrix: np.ndarray) -> bytes:
    """Encode a 2-D array as a float32 little-endian ``SFMX`` matrix frame."""
    arr = np.ascontiguousarray(matrix, dtype="<f4")
    if arr.ndim != 2:
        raise UploadMalformed(f"matrix must be 2-D, got shape {arr.shape}")
    return _MATRIX_MAGIC + struct.pack(">II", *arr.shape) + arr.tobytes()


def decode_matrix(data: bytes, *, shape: tuple[int, int] | None = None, bound: float | None = None) -> np.ndarray:  # noqa: E501
    """Decode an ``SFMX`` frame, checking shape, finiteness and ``|x| <= bound``.

    Raises
    ------
    UploadMalformed
        On any framing, shape or range defect.
    """
    if len(data) < 12 or data[:4] != _MATRIX_MAGIC:
        raise UploadMalformed("matrix does not start with the b'SFMX' frame")
    rows, cols = struct.unpack(">II", data[4:12])
    if rows * cols > _MAX_MATRIX_ELEMENTS or len(data) != 12 + 4 * rows * cols:
        raise UploadMalformed(f"matrix of {rows}x{cols} does not match its {len(data)} bytes")
    if shape is not None and (rows, cols) != tuple(shape):
        raise UploadMalformed(f"matrix shape {(rows, cols)} differs from the expected {shape}")
    arr = np.frombuffer(data, dtype="<f4", offset=12).reshape(rows, cols).astype(np.float32)
    if not np.isfinite(arr).all():
        raise UploadMalformed("matrix contains NaN or infinite values")
    if bound is not None and arr.size and float(np.abs(arr).max()) > bound * (1 + 1e-6):
        raise UploadMalformed(f"matrix values exceed the public bound {bound}")
    return arr


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
    """Frame a :class:`Publication` as bytes."""
    head = _canonical(
        {"round_id": pub.round_id, "weights": pub.weights, "excluded": list(pub.excluded)}
    )
    frame = _PUB_MAGIC + struct.pack(">BI", _VERSION, len(head)) + head
    return frame + encode_matrix(pub.aggregate)


def decode_publication(data: bytes, *, max_bytes: int, shape: tuple[int, int] | None = None) -> Publication:  # noqa: E501
    """Parse publication bytes (participant side).

    Raises
    ------
    UploadMalformed
        On any framing, header or matrix defect.
    """
    raw, rest = _split_frame(data, _PUB_MAGIC, max_bytes=max_bytes, what="publication")
    round_id, weights, excluded = raw.get("round_id"), raw.get("weights"), raw.get("excluded")
    if not isinstance(round_id, int) or not isinstance(weights, dict):
        raise UploadMalformed("publication header needs an integer round_id and a weights object")
    if not isinstance(excluded, list) or not all(isinstance(e, str) for e in excluded):
        raise UploadMalformed("publication header 'excluded' must be a list of ids")
    if not all(isinstance(v, int | float) for v in weights.values()):
        raise UploadMalformed("publication weights must be numbers")
    return Publication(
        round_id=round_id,
        aggregate=decode_matrix(rest, shape=shape),
        weights={str(k): float(v) for k, v in weights.items()},
        excluded=tuple(excluded),
    )
