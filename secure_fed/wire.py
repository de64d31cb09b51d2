"""Byte frames between the servers: aggregator, key authority and shares-mode helper.

Every server-to-server message is ``magic (4) | u32 header_len | canonical JSON
header | u64 payload_len | payload`` (big-endian lengths), size-checked before
parsing, so each party can move into its own process unchanged. Arrays travel
as little-endian float64 or uint64 with their shape in the header.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from secure_fed.errors import AuthorityRequestMalformed

__all__ = ["decode_array", "decode_frame", "encode_array", "encode_frame"]

_MAX_HEADER = 1 << 20
_DTYPES = {"f8": "<f8", "u8": "<u8"}


def encode_frame(magic: bytes, header: dict[str, object], payload: bytes = b"") -> bytes:
    """Frame a JSON header and a payload under a 4-byte ``magic``."""
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return b"".join((magic, struct.pack(">I", len(head)), head,
                     struct.pack(">Q", len(payload)), payload))  # fmt: skip


def decode_frame(data: bytes, magic: bytes, *, max_bytes: int) -> tuple[dict[str, object], bytes]:
    """Parse a frame, checking size, magic and lengths before reading.

    Raises
    ------
    AuthorityRequestMalformed
        On any size, magic, length or JSON defect.
    """
    if not isinstance(data, bytes | bytearray):
        raise AuthorityRequestMalformed(f"frame must be bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise AuthorityRequestMalformed(f"frame of {len(data)} bytes exceeds {max_bytes}")
    if len(data) < 16 or bytes(data[:4]) != magic:
        raise AuthorityRequestMalformed(f"frame does not start with {magic!r}")
    (head_len,) = struct.unpack(">I", data[4:8])
    if head_len > _MAX_HEADER or 8 + head_len + 8 > len(data):
        raise AuthorityRequestMalformed(f"frame header length {head_len} is out of range")
    try:
        header = json.loads(bytes(data[8 : 8 + head_len]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AuthorityRequestMalformed(f"frame header is not JSON: {exc}") from None
    (payload_len,) = struct.unpack(">Q", data[8 + head_len : 16 + head_len])
    payload = bytes(data[16 + head_len :])
    if not isinstance(header, dict) or payload_len != len(payload):
        raise AuthorityRequestMalformed("frame header must be an object and lengths must match")
    return header, payload


def encode_array(array: np.ndarray, dtype: str = "f8") -> tuple[dict[str, object], bytes]:
    """Return ``({"shape", "dtype"}, bytes)`` for a float64 or uint64 array."""
    arr = np.ascontiguousarray(array, dtype=_DTYPES[dtype])
    return {"shape": list(arr.shape), "dtype": dtype}, arr.tobytes()


def decode_array(meta: object, data: bytes) -> np.ndarray:
    """Inverse of :func:`encode_array`; checks the byte length against the shape.

    Raises
    ------
    AuthorityRequestMalformed
        On a bad shape, dtype or length.
    """
    if not isinstance(meta, dict) or meta.get("dtype") not in _DTYPES:
        raise AuthorityRequestMalformed("array metadata needs a dtype of f8 or u8")
    shape = meta.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise AuthorityRequestMalformed(f"array shape is invalid: {shape!r}")
    if int(np.prod(shape, dtype=np.int64)) * 8 != len(data):
        raise AuthorityRequestMalformed(f"array of shape {shape} does not match {len(data)} bytes")
    out = np.frombuffer(data, dtype=_DTYPES[str(meta["dtype"])]).reshape(shape)
    return out.astype(np.float64 if meta["dtype"] == "f8" else np.uint64)
