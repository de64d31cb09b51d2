"""Share labels and the seed-expanding PRG (ChaCha20, RFC 8439, via pycryptodome).

A participant may send one of its two additive shares as a fresh 256-bit seed
instead of ``8 * n`` bytes. The receiver expands it with ChaCha20 keyed by
``HMAC-SM3(seed, domain || label)`` (GB/T 32905, RFC 2104), so the keystream is
bound to the round, the participant and the tensor: one seed can never yield
the same mask in two rounds or for two tensors, even if it were reused.
"""

from __future__ import annotations

import hmac
import secrets
import struct
from dataclasses import dataclass

import numpy as np
from Crypto.Cipher import ChaCha20

from crypto.errors import ParameterInvalid
from crypto.shares._ring import RingArray

SEED_BYTES = 32
"""Length of a PRG seed (256 bits)."""

MAX_LABEL_FIELD = 128
"""Maximum UTF-8 length of ``participant_id`` and ``tensor`` in a label."""

_PRG_DOMAIN = b"secure-fed/shares/prg/v1\x00"
_NONCE = bytes(12)
_LABEL_MAGIC = b"SFL1"


@dataclass(frozen=True, kw_only=True)
class ShareLabel:
    """Domain-separation label of a shared tensor: round, participant, tensor name.

    Parameters
    ----------
    round_id
        Round number, ``0 <= round_id < 2^63``.
    participant_id
        Participant (or server-side computation) identifier, 1 to 128 UTF-8 bytes.
    tensor
        Name of the tensor, e.g. ``"predictions"``, 1 to 128 UTF-8 bytes.

    Raises
    ------
    ParameterInvalid
        If a field is out of range.
    """

    round_id: int
    participant_id: str
    tensor: str

    def __post_init__(self) -> None:
        if not isinstance(self.round_id, int) or not 0 <= self.round_id < 1 << 63:
            raise ParameterInvalid(f"round_id must be an int in [0, 2^63), got {self.round_id!r}")
        for name in ("participant_id", "tensor"):
            value = getattr(self, name)
            if not isinstance(value, str) or not 1 <= len(value.encode()) <= MAX_LABEL_FIELD:
                raise ParameterInvalid(f"{name} must be 1 to {MAX_LABEL_FIELD} UTF-8 bytes")

    def to_bytes(self) -> bytes:
        """Return the canonical, injective byte encoding of the label."""
        pid = self.participant_id.encode()
        tensor = self.tensor.encode()
        return (
            _LABEL_MAGIC
            + struct.pack(">QB", self.round_id, len(pid))
            + pid
            + struct.pack(">B", len(tensor))
            + tensor
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> ShareLabel:
        """Parse the canonical encoding produced by :meth:`to_bytes`.

        Raises
        ------
        ParameterInvalid
            If the bytes are not a canonical label.
        """
        try:
            if data[:4] != _LABEL_MAGIC:
                raise ValueError("magic")
            round_id, plen = struct.unpack_from(">QB", data, 4)
            pid = data[13 : 13 + plen]
            (tlen,) = struct.unpack_from(">B", data, 13 + plen)
            tensor = data[14 + plen : 14 + plen + tlen]
            if 14 + plen + tlen != len(data) or len(pid) != plen:
                raise ValueError("length")
            label = cls(round_id=round_id, participant_id=pid.decode(), tensor=tensor.decode())
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            raise ParameterInvalid("label bytes are not a canonical share label") from exc
        return label


def new_seed() -> bytes:
    """Return a fresh 256-bit seed from :func:`secrets.token_bytes`."""
    return secrets.token_bytes(SEED_BYTES)


def keystream(seed: bytes, domain: bytes, label: ShareLabel, nbytes: int) -> bytes:
    """Return ``nbytes`` of ChaCha20 keystream bound to ``domain`` and ``label``.

    Raises
    ------
    ParameterInvalid
        If the seed is not 32 bytes or ``nbytes`` is negative.
    """
    if not isinstance(seed, bytes | bytearray) or len(seed) != SEED_BYTES:
        raise ParameterInvalid(f"seed must be {SEED_BYTES} bytes")
    if nbytes < 0:
        raise ParameterInvalid(f"nbytes must be >= 0, got {nbytes}")
    key = hmac.new(bytes(seed), _PRG_DOMAIN + domain + b"\x00" + label.to_bytes(), "sm3").digest()
    return bytes(ChaCha20.new(key=key, nonce=_NONCE).encrypt(bytes(nbytes)))


def expand_seed(seed: bytes, label: ShareLabel, count: int) -> RingArray:
    """Expand a seed into ``count`` pseudorandom ring elements for ``label``.

    Parameters
    ----------
    seed
        32-byte seed from :func:`new_seed`.
    label
        Domain-separation label (round, participant, tensor).
    count
        Number of ``uint64`` elements.

    Returns
    -------
    numpy.ndarray
        Flat ``uint64`` array; the same inputs always give the same output.

    Raises
    ------
    ParameterInvalid
        If the seed is not 32 bytes or ``count`` is negative.
    """
    if count < 0:
        raise ParameterInvalid(f"count must be >= 0, got {count}")
    stream = keystream(seed, b"share", label, 8 * count)
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)
