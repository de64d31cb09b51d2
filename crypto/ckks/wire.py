"""Wire format and validated loading of CKKS ciphertexts from untrusted senders.

Layout (big-endian)::

    magic "SFCKCT" (6) | version (1) | kind (1) | preset wire id (1) |
    weight bits (1) | contributors (2) | context SM3 fingerprint (32) |
    n_samples (4) | n_classes (4) | count (4) | count x (length (4) | vector)

Each ``vector`` is a TenSEAL ``CKKSVector`` serialized *without* its context
(SEAL's own zstd-compressed ciphertext format inside). The loader checks, in
this order and before any parsing of a vector: total byte size, header, preset,
context fingerprint, shape, ciphertext count and per-vector length; then, after
SEAL parsed a vector against the public context (SEAL checks every coefficient
is reduced modulo its prime): number of SEAL ciphertexts, polynomial count (2),
ring degree, level (coefficient-modulus size and chain index), scale and the
number of packed values.

These checks guarantee well-formedness, not integrity: a mutated coefficient
that stays below its prime parses "fine" and decrypts to different numbers.
Integrity comes from the SM2 signature over the upload, checked by the round
protocol before this loader runs.
"""

from __future__ import annotations

import hmac
import struct

from crypto.ckks import _tenseal
from crypto.ckks._tenseal import TsContext, TsVector
from crypto.ckks.keys import PublicContext, _public_ts
from crypto.ckks.packing import KINDS, EncryptedMatrix, Kind, Layout
from crypto.ckks.presets import CkksPreset
from crypto.errors import CiphertextRejected, ContextMismatch, ParameterInvalid

__all__ = [
    "claimed_kind",
    "dump_encrypted",
    "expected_level",
    "load_encrypted",
    "max_wire_bytes",
]

MAGIC = b"SFCKCT"
VERSION = 1
_HEADER = struct.Struct(">6sBBBBH32sIII")
_LEN = struct.Struct(">I")


def expected_level(preset: CkksPreset, kind: Kind) -> int:
    """Return the number of coefficient-modulus primes a ciphertext of ``kind`` carries."""
    if kind == "upload" or (kind == "aggregate" and preset.weight_encoding == "integer"):
        return preset.data_primes
    if kind == "aggregate":
        return preset.data_primes - 1
    return preset.data_primes - preset.depth


def max_wire_bytes(preset: CkksPreset, layout: Layout, kind: Kind) -> int:
    """Largest acceptable encoding of ``layout``: header plus per-vector bounds."""
    count = 1 if kind == "score" else layout.count
    return _HEADER.size + count * (_LEN.size + preset.max_ciphertext_bytes)


def claimed_kind(data: bytes) -> tuple[Kind, int] | None:
    """Return the (kind, contributors) a ciphertext header *claims*, checking nothing else.

    For gatekeepers that must refuse a kind before parsing anything (the key
    authority never decrypts an ``upload``). The claim is whatever the sender
    wrote; :func:`load_encrypted` still validates the whole encoding. Returns
    ``None`` when ``data`` is too short or lacks this format's magic and version.
    """
    if not isinstance(data, bytes | bytearray) or len(data) < _HEADER.size:
        return None
    magic, version, kind_id, _, _, contributors, *_ = _HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION or kind_id >= len(KINDS):
        return None
    return KINDS[kind_id], contributors


def dump_encrypted(matrix: EncryptedMatrix) -> bytes:
    """Serialize an :class:`EncryptedMatrix` (ciphertexts only, no context)."""
    header = _HEADER.pack(
        MAGIC,
        VERSION,
        KINDS.index(matrix.kind),
        matrix.preset.wire_id,
        matrix.weight_bits,
        matrix.contributors,
        matrix.fingerprint,
        matrix.layout.n_samples,
        matrix.layout.n_classes,
        len(matrix.vectors),
    )
    parts = [header]
    for vector in matrix.vectors:
        blob = bytes(vector.serialize())
        parts.append(_LEN.pack(len(blob)))
        parts.append(blob)
    return b"".join(parts)


def _split(data: bytes, count: int, limit: int) -> list[bytes]:
    blobs, offset = [], _HEADER.size
    for i in range(count):
        if offset + _LEN.size > len(data):
            raise CiphertextRejected(f"truncated: length prefix of ciphertext {i} missing")
        (size,) = _LEN.unpack_from(data, offset)
        offset += _LEN.size
        if size == 0 or size > limit:
            raise CiphertextRejected(f"ciphertext {i} claims {size} bytes; limit is {limit}")
        if offset + size > len(data):
            raise CiphertextRejected(f"truncated: ciphertext {i} is cut short")
        blobs.append(data[offset : offset + size])
        offset += size
    if offset != len(data):
        raise CiphertextRejected(f"{len(data) - offset} trailing bytes after the last ciphertext")
    return blobs


def _parse_vector(ctx: TsContext, blob: bytes, i: int) -> TsVector:
    try:
        vector = _tenseal.lazy_vector(blob)
        vector.link_context(ctx)
        return vector
    except Exception as exc:  # TenSEAL/SEAL/protobuf raise assorted C++ exceptions
        raise CiphertextRejected(f"ciphertext {i} does not parse: {type(exc).__name__}") from None


def _check_vector(
    ctx: TsContext, vector: TsVector, i: int, preset: CkksPreset, level: int, size: int
) -> None:
    facts = _tenseal.ciphertext_facts(vector)
    if len(facts) != 1:
        raise CiphertextRejected(f"ciphertext {i} holds {len(facts)} SEAL ciphertexts; expected 1")
    polys, degree, primes, scale, parms_id = facts[0]
    if polys != 2:
        raise CiphertextRejected(f"ciphertext {i} has size {polys}; expected 2 polynomials")
    if degree != preset.poly_modulus_degree:
        raise CiphertextRejected(f"ciphertext {i} has ring degree {degree}")
    chain = _tenseal.chain_index(ctx, parms_id)
    if primes != level or chain != level - 1:
        raise CiphertextRejected(
            f"ciphertext {i} is at level {primes} primes (chain {chain}); expected {level}"
        )
    if scale != preset.scale:
        raise CiphertextRejected(
            f"ciphertext {i} has scale {scale!r}; expected 2^{preset.scale_bits}"
        )
    packed = int(vector.size())
    if packed != size:
        raise CiphertextRejected(f"ciphertext {i} packs {packed} values; expected {size}")


def _check_header(
    public: PublicContext, data: bytes, kind: Kind, layout: Layout
) -> tuple[int, int, bytes]:
    """Check everything before the vectors; return (weight bits, contributors, fingerprint)."""
    preset = public.preset
    (
        magic,
        version,
        kind_id,
        wire_id,
        weight_bits,
        contributors,
        fingerprint,
        rows,
        cols,
        count,
    ) = _HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise CiphertextRejected("bad magic or version: not a secure-fed CKKS ciphertext")
    if kind_id >= len(KINDS) or KINDS[kind_id] != kind:
        raise CiphertextRejected(f"kind byte {kind_id} is not the expected kind {kind!r}")
    if wire_id != preset.wire_id:
        raise ContextMismatch(f"ciphertexts name preset id {wire_id}, not {preset.name}")
    if not hmac.compare_digest(fingerprint, public.fingerprint):
        raise ContextMismatch("ciphertexts cite another context fingerprint (key epoch)")
    if (rows, cols) != (layout.n_samples, layout.n_classes):
        raise CiphertextRejected(
            f"shape {rows}x{cols}; expected {layout.n_samples}x{layout.n_classes}"
        )
    expected = 1 if kind == "score" else layout.count
    if count != expected:
        raise CiphertextRejected(f"{count} ciphertexts; expected {expected}")
    aggregate = kind == "aggregate"
    bits = preset.weight_bits if aggregate and preset.weight_encoding == "integer" else 0
    if weight_bits != bits:
        raise CiphertextRejected(f"weight bits {weight_bits}; expected {bits} for a {kind}")
    if contributors < 1 or (not aggregate and contributors != 1):
        raise CiphertextRejected(f"{contributors} contributors is impossible for a {kind}")
    return weight_bits, contributors, fingerprint


def load_encrypted(
    public: PublicContext, data: bytes, *, kind: Kind, n_samples: int, n_classes: int
) -> EncryptedMatrix:
    """Parse and validate untrusted ciphertext bytes for this key epoch.

    Parameters
    ----------
    public
        Public context of the current key epoch (its fingerprint is expected).
    data
        Bytes as produced by :meth:`EncryptedMatrix.to_bytes`.
    kind
        What the caller expects: ``"upload"``, ``"aggregate"`` or ``"score"``.
    n_samples, n_classes
        The expected matrix shape (from the round configuration).

    Raises
    ------
    CiphertextRejected
        Anything malformed; the message names the failed check.
    ContextMismatch
        The bytes cite another key epoch (fingerprint) or preset.
    ParameterInvalid
        ``kind`` or the expected shape is invalid (a caller error).
    """
    preset = public.preset
    if kind not in KINDS:
        raise ParameterInvalid(f"kind must be one of {', '.join(KINDS)}")
    layout = Layout(n_samples=n_samples, n_classes=n_classes, slots=preset.slots)
    limit = max_wire_bytes(preset, layout, kind)
    if not isinstance(data, bytes | bytearray):
        raise CiphertextRejected(f"ciphertext data must be bytes, not {type(data).__name__}")
    if not _HEADER.size < len(data) <= limit:
        raise CiphertextRejected(f"{len(data)} bytes is outside (header, {limit}] for this shape")
    data = bytes(data)
    weight_bits, contributors, fingerprint = _check_header(public, data, kind, layout)
    ctx = _public_ts(public)
    level = expected_level(preset, kind)
    count = 1 if kind == "score" else layout.count
    vectors = []
    for i, blob in enumerate(_split(data, count, preset.max_ciphertext_bytes)):
        vector = _parse_vector(ctx, blob, i)
        start, stop = (0, 1) if kind == "score" else layout.run(i % layout.chunks)
        _check_vector(ctx, vector, i, preset, level, stop - start)
        vectors.append(vector)
    return EncryptedMatrix(
        kind=kind,
        preset=preset,
        fingerprint=fingerprint,
        layout=layout,
        vectors=vectors,
        weight_bits=weight_bits,
        contributors=contributors,
    )
