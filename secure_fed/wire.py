"""The one wire module: every byte message of secure-fed, its frame and its limits.

Every message that crosses a party boundary (participant, aggregator, key
authority, shares-mode helper) is one frame of a kind listed in
:data:`MESSAGE_KINDS` (after Flower's ``secaggplus_constants``: one table, no
magic bytes elsewhere). A frame is, with big-endian integers::

    magic (4) | u8 version | u32 header_len | header | u64 payload_len | payload

The header is canonical JSON (:mod:`privacy_ledger.audit.canonical`: sorted
keys, no whitespace, no floats). :func:`decode_frame` checks, in order and
before parsing anything: type, total size against the kind's ceiling and the
caller's limit, magic, version, header length, then decodes the header
strictly (bytes that are not already canonical are refused) and checks the
payload length. Every defect raises the kind's typed error
(:class:`~secure_fed.errors.UploadMalformed` on the participant side,
:class:`~secure_fed.errors.AuthorityRequestMalformed` between servers).

Numbers: canonical JSON has no floats, so :func:`encode_frame` writes a float
header value as the exact decimal string of its shortest ``repr``
(``0.1`` -> ``"0.1"``, :func:`privacy_ledger.audit.canonical.decimal_from_float`)
and a receiver reads it back bit-for-bit with :func:`number_from_wire`. The
canonical module caps a decimal at 100 characters, so floats far from 1 (below
about ``1e-80`` or above ``1e99`` in magnitude) are refused like NaN; weights,
bounds and scores are nowhere near.
Arrays travel in the payload as little-endian ``f4``, ``f8`` or ``u8`` with
``{"dtype", "shape"}`` in the header (:func:`encode_array`); a prediction
matrix is its own ``matrix`` frame (:func:`encode_matrix`). Ciphertexts and
share blobs inside payloads keep the formats of :mod:`crypto.ckks.wire` and
:mod:`crypto.shares`. The table is documented in ``docs/wire.md``.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from privacy_ledger.audit import canonical
from privacy_ledger.errors import CanonicalJSONInvalid
from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    SecureFedError,
    UploadMalformed,
)

__all__ = [
    "CKKS_UPLOAD",
    "ENVELOPE",
    "HELPER_REPLY",
    "HELPER_REQUEST",
    "KEY_AUTHORITY_REPLY",
    "KEY_AUTHORITY_REQUEST",
    "MATRIX",
    "MESSAGE_KINDS",
    "PUBLICATION",
    "SHARES_UPLOAD",
    "UPLOAD",
    "MessageKind",
    "decode_array",
    "decode_frame",
    "decode_matrix",
    "encode_array",
    "encode_frame",
    "decimal_text",
    "encode_header",
    "encode_matrix",
    "kind_of",
    "number_from_wire",
]

_PREFIX = struct.Struct(">4sBI")  # magic, version, header length
_PAYLOAD_LEN = struct.Struct(">Q")
_MIN_FRAME = _PREFIX.size + _PAYLOAD_LEN.size
_DTYPES = {"f4": "<f4", "f8": "<f8", "u8": "<u8"}
_OUT_DTYPES = {"f4": np.float32, "f8": np.float64, "u8": np.uint64}
_ITEMSIZE = {"f4": 4, "f8": 8, "u8": 8}
_DECIMAL = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$")
_MAX_DECIMAL = 100  # characters, the canonical module's limit
_MAX_MATRIX_ELEMENTS = 50_000_000


@dataclass(frozen=True)
class MessageKind:
    """One row of the message table.

    Parameters
    ----------
    name
        Table key (``upload``, ``key_authority_request``...).
    magic
        Four bytes that start every frame of this kind.
    version
        The only version byte accepted; bumped whenever the bytes change.
    max_bytes
        Ceiling of a whole frame; callers may pass a smaller limit.
    max_header
        Ceiling of the canonical JSON header.
    error
        Typed error raised for every defect of a frame of this kind.
    description
        Who sends it to whom, and what it carries.
    """

    name: str
    magic: bytes
    version: int
    max_bytes: int
    max_header: int
    error: type[SecureFedError]
    description: str


_U, _A = UploadMalformed, AuthorityRequestMalformed
#: name, magic, max frame MiB, max header KiB, error, who sends what (all at version 2).
_TABLE = (
    ("upload", b"SFUP", 256, 64, _U, "participant -> aggregator: UploadHeader + mode payload"),
    ("envelope", b"SFSE", 256, 4, _U, "participant -> aggregator: signed header + upload"),
    ("publication", b"SFPB", 256, 64, _U, "aggregator -> participants: weights + matrix"),
    ("matrix", b"SFMX", 256, 1, _U, "a [rows, cols] float32 matrix (plaintext, publication)"),
    ("shares_upload", b"SFSH", 256, 4, _U, "shares payload: aggregator share + sealed seed"),
    ("ckks_upload", b"SFCU", 256, 1, _U, "ckks payload: scoring + publication ciphertexts"),
    ("key_authority_request", b"SFKR", 1024, 1024, _A, "aggregator -> key authority"),
    ("key_authority_reply", b"SFKA", 1024, 1024, _A, "key authority -> aggregator"),
    ("helper_request", b"SFHR", 1024, 1024, _A, "aggregator -> shares-mode helper"),
    ("helper_reply", b"SFHA", 1024, 1024, _A, "shares-mode helper -> aggregator"),
)

#: Every message kind by name: the one table of magic bytes, versions and limits.
MESSAGE_KINDS: Mapping[str, MessageKind] = MappingProxyType(
    {
        name: MessageKind(name, magic, 2, mib << 20, kib << 10, error, description)
        for name, magic, mib, kib, error, description in _TABLE
    }
)
UPLOAD = MESSAGE_KINDS["upload"]
ENVELOPE = MESSAGE_KINDS["envelope"]
PUBLICATION = MESSAGE_KINDS["publication"]
MATRIX = MESSAGE_KINDS["matrix"]
SHARES_UPLOAD = MESSAGE_KINDS["shares_upload"]
CKKS_UPLOAD = MESSAGE_KINDS["ckks_upload"]
KEY_AUTHORITY_REQUEST = MESSAGE_KINDS["key_authority_request"]
KEY_AUTHORITY_REPLY = MESSAGE_KINDS["key_authority_reply"]
HELPER_REQUEST = MESSAGE_KINDS["helper_request"]
HELPER_REPLY = MESSAGE_KINDS["helper_reply"]
_BY_MAGIC = {k.magic: k for k in MESSAGE_KINDS.values()}


def kind_of(kind: MessageKind | bytes) -> MessageKind:
    """Return ``kind``, or the registered kind whose magic is ``kind``.

    Raises
    ------
    ModeSetupInvalid
        If no registered kind has that magic; the message lists them.
    """
    if isinstance(kind, MessageKind):
        return kind
    found = _BY_MAGIC.get(bytes(kind))
    if found is None:
        known = {k.name: k.magic for k in MESSAGE_KINDS.values()}
        raise ModeSetupInvalid(f"no message kind has magic {kind!r}; registered: {known}")
    return found


def _floats_to_decimals(value: object) -> object:
    if isinstance(value, float):
        return canonical.decimal_from_float(value)
    if isinstance(value, Mapping):
        return {k: _floats_to_decimals(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_floats_to_decimals(v) for v in value]
    return value


def encode_header(kind: MessageKind | bytes, header: Mapping[str, object]) -> bytes:
    """Return the canonical JSON bytes :func:`encode_frame` writes for ``header``.

    Raises
    ------
    SecureFedError
        The kind's error when a value cannot be encoded (NaN, unsupported type)
        or the header exceeds the kind's ``max_header``.
    """
    spec = kind_of(kind)
    try:
        head = canonical.encode(_floats_to_decimals(header))
    except CanonicalJSONInvalid as exc:
        raise spec.error(f"{spec.name} header cannot be encoded: {exc.message}") from None
    if len(head) > spec.max_header:
        raise spec.error(f"{spec.name} header of {len(head)} bytes exceeds {spec.max_header}")
    return head


def encode_frame(
    kind: MessageKind | bytes, header: Mapping[str, object], payload: bytes = b""
) -> bytes:
    """Frame ``header`` and ``payload`` as one message of ``kind`` (a kind or its magic).

    Raises
    ------
    SecureFedError
        The kind's error on an unencodable header or a frame over its ``max_bytes``.
    """
    spec = kind_of(kind)
    head = encode_header(spec, header)
    if _MIN_FRAME + len(head) + len(payload) > spec.max_bytes:
        raise spec.error(f"{spec.name} frame would exceed {spec.max_bytes} bytes")
    prefix = _PREFIX.pack(spec.magic, spec.version, len(head))
    return b"".join((prefix, head, _PAYLOAD_LEN.pack(len(payload)), payload))


def decode_frame(
    data: bytes, kind: MessageKind | bytes, *, max_bytes: int | None = None
) -> tuple[dict[str, object], bytes]:
    """Parse one frame of ``kind`` after size, magic, version and length checks.

    Parameters
    ----------
    data
        Untrusted bytes (``bytes``, ``bytearray`` or ``memoryview``).
    kind
        The kind the caller expects (or its magic).
    max_bytes
        Optional limit below the kind's ``max_bytes`` (a round's upload limit).

    Returns
    -------
    tuple
        ``(header, payload)``.

    Raises
    ------
    SecureFedError
        The kind's error naming the first failed check.
    """
    spec = kind_of(kind)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise spec.error(f"{spec.name} must be bytes, got {type(data).__name__}")
    limit = spec.max_bytes if max_bytes is None else min(max_bytes, spec.max_bytes)
    if len(data) > limit:
        raise spec.error(f"{spec.name} is {len(data)} bytes, over the limit of {limit}")
    data = bytes(data)
    end = _header_end(data, spec)
    try:
        header = canonical.decode(data[_PREFIX.size : end])
    except CanonicalJSONInvalid as exc:
        raise spec.error(f"{spec.name} header is not canonical JSON: {exc.message}") from None
    if not isinstance(header, dict):
        raise spec.error(f"{spec.name} header must be a JSON object")
    (payload_len,) = _PAYLOAD_LEN.unpack_from(data, end)
    payload = data[end + _PAYLOAD_LEN.size :]
    if payload_len != len(payload):
        raise spec.error(f"{spec.name} payload is {len(payload)} bytes, header says {payload_len}")
    return header, payload


def _header_end(data: bytes, spec: MessageKind) -> int:
    """Check magic, version and header length; return where the header ends."""
    if len(data) < _MIN_FRAME or data[:4] != spec.magic:
        raise spec.error(f"{spec.name} frame does not start with {spec.magic!r}")
    _, version, head_len = _PREFIX.unpack_from(data)
    if version != spec.version:
        raise spec.error(
            f"{spec.name} frame version {version} is not supported (expected {spec.version})"
        )
    end: int = _PREFIX.size + head_len
    if head_len > spec.max_header or end + _PAYLOAD_LEN.size > len(data):
        raise spec.error(f"{spec.name} header length {head_len} is out of range")
    return end


def number_from_wire(value: object) -> float | None:
    """Read a header number: an integer or an exact decimal string; ``None`` otherwise.

    The inverse of how :func:`encode_frame` writes floats: ``float("0.1")`` is
    the float that was sent, bit for bit.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and len(value) <= _MAX_DECIMAL and _DECIMAL.match(value):
        return float(value)
    return None


def decimal_text(value: float) -> str:
    """Exact decimal string of a finite float's shortest ``repr`` (``8.0`` -> ``"8.0"``)."""
    return format(canonical.decimal_from_float(value), "f")


def encode_array(array: np.ndarray, dtype: str = "f8") -> tuple[dict[str, object], bytes]:
    """Return ``({"dtype", "shape"}, bytes)`` for a ``f4``, ``f8`` or ``u8`` array."""
    arr = np.ascontiguousarray(array, dtype=_DTYPES[dtype])
    return {"shape": list(arr.shape), "dtype": dtype}, arr.tobytes()


def decode_array(
    meta: object, data: bytes, *, error: type[SecureFedError] = AuthorityRequestMalformed
) -> np.ndarray:
    """Inverse of :func:`encode_array`; checks the byte length against the shape.

    Raises
    ------
    SecureFedError
        ``error`` on a bad shape, dtype or length.
    """
    dtype = meta.get("dtype") if isinstance(meta, dict) else None
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise error(f"array metadata needs a dtype in {sorted(_DTYPES)}")
    shape = meta.get("shape") if isinstance(meta, dict) else None
    if not isinstance(shape, list) or not all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
    ):
        raise error(f"array shape is invalid: {shape!r}")
    if math.prod(shape) * _ITEMSIZE[dtype] != len(data):
        raise error(f"array of shape {shape} does not match {len(data)} bytes")
    out = np.frombuffer(data, dtype=_DTYPES[dtype]).reshape(shape)
    return out.astype(_OUT_DTYPES[dtype])


def encode_matrix(matrix: np.ndarray) -> bytes:
    """Encode a 2-D array as a float32 ``matrix`` frame.

    Raises
    ------
    UploadMalformed
        If ``matrix`` is not 2-D.
    """
    arr = np.asarray(matrix)
    if arr.ndim != 2:
        raise UploadMalformed(f"matrix must be 2-D, got shape {arr.shape}")
    meta, raw = encode_array(arr, "f4")
    return encode_frame(MATRIX, meta, raw)


def decode_matrix(
    data: bytes, *, shape: tuple[int, int] | None = None, bound: float | None = None
) -> np.ndarray:
    """Decode a ``matrix`` frame, checking shape, finiteness and ``|x| <= bound``.

    Raises
    ------
    UploadMalformed
        On any framing, shape or range defect.
    """
    meta, raw = decode_frame(data, MATRIX)
    dims = meta.get("shape")
    if meta.get("dtype") != "f4" or not isinstance(dims, list) or len(dims) != 2:
        raise UploadMalformed(f"matrix header must name a 2-D f4 array, got {meta!r}")
    arr = decode_array(meta, raw, error=UploadMalformed)
    if arr.size > _MAX_MATRIX_ELEMENTS:
        raise UploadMalformed(f"matrix of {arr.shape} exceeds {_MAX_MATRIX_ELEMENTS} values")
    if shape is not None and arr.shape != tuple(shape):
        raise UploadMalformed(f"matrix shape {arr.shape} differs from the expected {shape}")
    if not np.isfinite(arr).all():
        raise UploadMalformed("matrix contains NaN or infinite values")
    if bound is not None and arr.size and float(np.abs(arr).max()) > bound * (1 + 1e-6):
        raise UploadMalformed(f"matrix values exceed the public bound {bound}")
    return arr
