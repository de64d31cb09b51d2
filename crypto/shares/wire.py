"""Authenticated wire framing for shares, seeds, Beaver triples and openings.

Each blob is ``header || payload || tag`` where the tag is HMAC-SM3
(RFC 2104 over GB/T 32905, via OpenSSL ``hashlib``) of everything before it,
under a :class:`ShareMacKey` the sender shares with that one recipient. Parsing
untrusted bytes checks every size before reading, then the tag in constant
time, then the kind, ring, party and label; any mismatch raises
:class:`~crypto.errors.ShareTampered`.

Header (big-endian): ``magic "SFS1" | kind u8 | ring u8 | party u8 |
frac_bits u8 | count u64 | label_len u16 | label``.
"""

from __future__ import annotations

import hmac
import secrets
import struct
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from crypto.errors import CryptoError, ParameterInvalid, ShareTampered
from crypto.shares._ring import RING_ID, RingArray
from crypto.shares.prg import ShareLabel
from crypto.sm import SM4GCM

MAGIC = b"SFS1"
TAG_BYTES = 32
KEY_BYTES = 32
_HEAD = struct.Struct(">4sBBBBQH")
_KEY_DOMAIN = b"secure-fed/shares/mac-key/v1\x00"
MAX_LABEL_BYTES = 512

KIND_VALUES = 1
KIND_SEED = 2
KIND_TRIPLE = 3
KIND_TRIPLE_SEED = 4
KIND_OPENING = 5
KIND_AUTH_MASK = 6
"""An input mask's share and its MAC shares (``crypto.shares.mac``): 3 words each."""

DEFAULT_MAX_COUNT = 1 << 26
"""Default cap on elements in one blob (512 MiB of values) when parsing."""


class ShareMacKey:
    """Opaque 256-bit HMAC-SM3 key for one sender-recipient pair.

    Construct with :meth:`generate` or :meth:`derive`; the key is never shown by
    ``repr`` and cannot be pickled.
    """

    __slots__ = ("_key", "_recipient")

    def __init__(self, *, _key: bytes, recipient: str) -> None:
        if len(_key) != KEY_BYTES:
            raise ParameterInvalid(f"MAC key must be {KEY_BYTES} bytes")
        self._key = bytes(_key)
        self._recipient = recipient

    @classmethod
    def generate(cls, *, recipient: str) -> ShareMacKey:
        """Return a fresh random key for ``recipient`` (from :mod:`secrets`)."""
        return cls(_key=secrets.token_bytes(KEY_BYTES), recipient=recipient)

    @classmethod
    def derive(cls, shared_secret: bytes, *, recipient: str) -> ShareMacKey:
        """Derive the key for ``recipient`` from a secret the two ends share.

        Parameters
        ----------
        shared_secret
            At least 32 bytes agreed with the recipient (key exchange or enrolment).
        recipient
            Recipient name, e.g. ``"aggregator"`` or ``"helper"``; keys for
            different recipients are independent.

        Raises
        ------
        ParameterInvalid
            If the secret is shorter than 32 bytes or the recipient is empty.
        """
        if not isinstance(shared_secret, bytes) or len(shared_secret) < KEY_BYTES:
            raise ParameterInvalid(f"shared_secret must be at least {KEY_BYTES} bytes")
        if not recipient:
            raise ParameterInvalid("recipient must be a non-empty name")
        key = hmac.new(shared_secret, _KEY_DOMAIN + recipient.encode(), "sm3").digest()
        return cls(_key=key, recipient=recipient)

    @property
    def recipient(self) -> str:
        """Name of the recipient this key authenticates blobs for."""
        return self._recipient

    def tag(self, message: bytes) -> bytes:
        """Return the 32-byte HMAC-SM3 tag of ``message``."""
        return hmac.new(self._key, message, "sm3").digest()

    def __repr__(self) -> str:
        return f"ShareMacKey(recipient={self._recipient!r}, key=<hidden>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("ShareMacKey cannot be pickled")


@dataclass(frozen=True)
class Frame:
    """A verified, parsed blob: header fields and the raw payload."""

    kind: int
    party: int
    frac_bits: int
    count: int
    label: ShareLabel
    payload: bytes

    def words(self) -> RingArray:
        """Return the payload as little-endian ring elements (``uint64``)."""
        return np.frombuffer(self.payload, dtype="<u8").astype(np.uint64)


def seal(
    key: ShareMacKey,
    *,
    kind: int,
    party: int,
    count: int,
    label: ShareLabel,
    payload: bytes | RingArray,
    frac_bits: int = 0,
) -> bytes:
    """Frame ``payload`` and tag it under ``key`` (:func:`pack` of a :class:`Frame`).

    Parameters
    ----------
    key
        MAC key shared with the recipient.
    kind, party, count, label, frac_bits
        Header fields; the recipient's :func:`unpack` checks each one.
    payload
        Raw bytes (a seed), or ring elements written little-endian.
    """
    data = payload if isinstance(payload, bytes) else payload.astype("<u8").tobytes()
    frame = Frame(
        kind=kind, party=party, frac_bits=frac_bits, count=count, label=label, payload=data
    )
    return pack(frame, key)


def pack(frame: Frame, key: ShareMacKey) -> bytes:
    """Serialize ``frame`` and append its HMAC-SM3 tag under ``key``."""
    label = frame.label.to_bytes()
    head = _HEAD.pack(
        MAGIC, frame.kind, RING_ID, frame.party, frame.frac_bits, frame.count, len(label)
    )
    body = head + label + frame.payload
    return body + key.tag(body)


_SEAL_DOMAIN = b"secure-fed/shares/dealer-seal/v1\x00"


def _sealer(key: ShareMacKey) -> SM4GCM:
    return SM4GCM(key.tag(_SEAL_DOMAIN)[:16])  # the dealer-to-party channel's confidentiality


def seal_to(key: ShareMacKey, blob: bytes) -> bytes:
    """Encrypt a dealt blob for its recipient (SM4-GCM under a key derived from ``key``).

    The helper's dealt material travels through the aggregator: tagged only, its
    shares (triples, range masks) would be readable there, and with the aggregator's
    own half they open every masked value. Sealed, the aggregator forwards bytes it
    cannot read.
    """
    sealer = _sealer(key)
    return sealer.encrypt(blob, associated_data=_SEAL_DOMAIN)


def open_sealed(key: ShareMacKey, sealed: bytes) -> bytes:
    """Decrypt a blob sealed with :func:`seal_to`.

    Raises
    ------
    ShareTampered
        If it does not decrypt under ``key`` (altered, or sealed for another party).
    """
    if not isinstance(sealed, bytes | bytearray):
        raise ShareTampered("a sealed blob must be bytes")
    try:
        return _sealer(key).decrypt(bytes(sealed), associated_data=_SEAL_DOMAIN)
    except CryptoError as exc:
        raise ShareTampered(f"the dealt blob does not decrypt for this party: {exc}") from exc


def payload_size(kind: int, count: int) -> int:
    """Return the exact payload length in bytes of a blob of ``kind`` and ``count``."""
    sizes = {
        KIND_VALUES: 8 * count,
        KIND_SEED: 32,
        KIND_TRIPLE: 24 * count,
        KIND_TRIPLE_SEED: 32,
        KIND_OPENING: 16 * count,
        KIND_AUTH_MASK: 24 * count,
    }
    return sizes[kind]


def frame_overhead(label: ShareLabel) -> int:
    """Return header plus tag bytes of a blob carrying ``label``."""
    return _HEAD.size + len(label.to_bytes()) + TAG_BYTES


def unpack(
    blob: bytes,
    *,
    key: ShareMacKey,
    kind: int,
    party: int,
    label: ShareLabel,
    max_count: int = DEFAULT_MAX_COUNT,
    count: int | None = None,
) -> Frame:
    """Parse and verify untrusted bytes; every check raises :class:`ShareTampered`.

    Parameters
    ----------
    blob
        Untrusted bytes.
    key
        MAC key shared with the sender.
    kind, party, label
        What the receiver expects; anything else is refused.
    max_count
        Largest element count accepted before any allocation.
    count
        Exact element count expected (e.g. ``N_pub * C`` from the round config);
        None accepts any count up to ``max_count``.

    Raises
    ------
    ShareTampered
        On wrong size, magic, ring, kind, party, label, count or tag.
    """
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise ShareTampered(f"share blob must be bytes, got {type(blob).__name__}")
    data = bytes(blob)
    if len(data) < _HEAD.size + TAG_BYTES:
        raise ShareTampered(f"share blob length {len(data)} is shorter than header and tag")
    magic, got_kind, ring, got_party, frac, got_count, llen = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise ShareTampered("share blob magic is wrong (not a secure-fed share)")
    if ring != RING_ID:
        raise ShareTampered(f"share blob ring id {ring} is not the expected ring Z_2^{RING_ID}")
    if got_kind not in (
        KIND_VALUES,
        KIND_SEED,
        KIND_TRIPLE,
        KIND_TRIPLE_SEED,
        KIND_OPENING,
        KIND_AUTH_MASK,
    ):
        raise ShareTampered(f"share blob kind {got_kind} is unknown")
    if got_count > max_count or llen > MAX_LABEL_BYTES:
        raise ShareTampered(f"share blob count {got_count} or label length {llen} exceeds limit")
    if count is not None and got_count != count:
        raise ShareTampered(f"share blob count {got_count} is not the expected count {count}")
    expected = _HEAD.size + llen + payload_size(got_kind, got_count) + TAG_BYTES
    if len(data) != expected:
        raise ShareTampered(f"share blob length {len(data)} != expected {expected} for its header")
    body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    if not hmac.compare_digest(key.tag(body), tag):
        raise ShareTampered("share blob authentication tag does not verify (tampered or wrong key)")
    if got_kind != kind:
        raise ShareTampered(f"share blob kind {got_kind} is not the expected kind {kind}")
    if got_party != party:
        raise ShareTampered(f"share blob is for party {got_party}, expected party {party}")
    raw_label = data[_HEAD.size : _HEAD.size + llen]
    if not hmac.compare_digest(raw_label, label.to_bytes()):
        raise ShareTampered("share blob label (round, participant, tensor) is not the expected one")
    payload = data[_HEAD.size + llen : -TAG_BYTES]
    return Frame(
        kind=got_kind,
        party=got_party,
        frac_bits=frac,
        count=got_count,
        label=label,
        payload=payload,
    )
