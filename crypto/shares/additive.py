"""Two-party additive secret sharing over Z_2^64, with PRG-seed shares.

``x = share0 + share1 (mod 2^64)`` with ``share1`` uniform, so each share alone
is uniform and independent of ``x`` (perfect secrecy of additive sharing; see
ABY, Demmler-Schneider-Zohner, NDSS 2015). With :func:`split_with_seed` the
second share is ``expand_seed(seed, label)``: party 1 receives 32 bytes instead
of ``8 * n``, halving the upload (the PRG-compressed shares of Prio, Corrigan-Gibbs
and Boneh, NSDI 2017, and of Boyle-Gilboa-Ishai function secret sharing).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from crypto.errors import ParameterInvalid, ShareTampered
from crypto.shares import wire
from crypto.shares._ring import RingArray, as_ring, check_party, random_ring, same_shape
from crypto.shares.prg import SEED_BYTES, ShareLabel, expand_seed, new_seed

logger = logging.getLogger(__name__)


def split(values: RingArray) -> tuple[RingArray, RingArray]:
    """Split ring elements into two additive shares.

    Parameters
    ----------
    values
        ``uint64`` ring array (e.g. from ``FixedPointCodec.encode``), any shape.

    Returns
    -------
    tuple of numpy.ndarray
        ``(share0, share1)`` of the same shape; ``share1`` is uniform from
        ``os.urandom`` and ``share0 = values - share1``.
    """
    ring = as_ring(values, name="values")
    share1 = random_ring(ring.size).reshape(ring.shape)
    return ring - share1, share1


def split_with_seed(values: RingArray, *, label: ShareLabel) -> tuple[RingArray, bytes]:
    """Split into an explicit share for party 0 and a fresh 32-byte seed for party 1.

    Parameters
    ----------
    values
        ``uint64`` ring array, any shape.
    label
        Round, participant and tensor the shares belong to; party 1 must use
        the same label in :func:`~crypto.shares.prg.expand_seed`.

    Returns
    -------
    tuple
        ``(share0, seed)`` with ``share0 = values - expand_seed(seed, label, n)``.
    """
    ring = as_ring(values, name="values")
    seed = new_seed()
    mask = expand_seed(seed, label, ring.size).reshape(ring.shape)
    return ring - mask, seed


@dataclass(frozen=True, kw_only=True, eq=False)
class ShareBundle:
    """One party's share of a labelled tensor: explicit values or a PRG seed.

    Build with :meth:`from_values` or :meth:`from_seed`; serialize with
    :meth:`to_bytes` and parse untrusted bytes with :meth:`parse`. ``repr``
    never shows share values or seeds. Values are flat; callers reshape.
    """

    label: ShareLabel
    party: int
    count: int
    frac_bits: int
    _values: RingArray | None = field(default=None, repr=False)
    _seed: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_values(
        cls, values: RingArray, *, label: ShareLabel, party: int, frac_bits: int
    ) -> ShareBundle:
        """Wrap an explicit share array for ``party`` (0 or 1)."""
        ring = as_ring(values, name="values").reshape(-1).copy()
        ring.flags.writeable = False
        return cls(
            label=label,
            party=check_party(party),
            count=ring.size,
            frac_bits=_check_frac(frac_bits),
            _values=ring,
        )

    @classmethod
    def from_seed(
        cls, seed: bytes, *, label: ShareLabel, count: int, frac_bits: int
    ) -> ShareBundle:
        """Wrap a 32-byte seed as party 1's share of ``count`` elements."""
        if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
            raise ParameterInvalid(f"seed must be {SEED_BYTES} bytes")
        if count < 0:
            raise ParameterInvalid(f"count must be >= 0, got {count}")
        return cls(label=label, party=1, count=count, frac_bits=_check_frac(frac_bits), _seed=seed)

    @property
    def seeded(self) -> bool:
        """True when the share travels as a PRG seed."""
        return self._seed is not None

    def values(self) -> RingArray:
        """Return the flat share array, expanding the seed if needed."""
        if self._seed is not None:
            return expand_seed(self._seed, self.label, self.count)
        if self._values is None:
            raise ParameterInvalid("share bundle holds neither values nor a seed")
        return self._values

    def to_bytes(self, key: wire.ShareMacKey) -> bytes:
        """Serialize with header and HMAC-SM3 tag under the recipient's ``key``."""
        seeded = self._seed is not None
        return wire.seal(
            key,
            kind=wire.KIND_SEED if seeded else wire.KIND_VALUES,
            party=self.party,
            count=self.count,
            label=self.label,
            payload=self._seed if self._seed is not None else self.values(),
            frac_bits=self.frac_bits,
        )

    @classmethod
    def parse(
        cls,
        blob: bytes,
        *,
        key: wire.ShareMacKey,
        label: ShareLabel,
        party: int,
        seeded: bool = False,
        max_count: int = wire.DEFAULT_MAX_COUNT,
        count: int | None = None,
    ) -> ShareBundle:
        """Parse and verify an untrusted share blob.

        Parameters
        ----------
        blob
            Untrusted bytes from the network.
        key
            MAC key shared with the sending participant.
        label, party, seeded
            What the receiver expects (seeded blobs are always party 1).
        max_count
            Largest element count accepted.
        count
            Exact element count expected (``N_pub * C``); checked before the
            tag, so a forged header cannot make a seed expand to a huge array.

        Raises
        ------
        ShareTampered
            If the size, ring id, kind, party, label, count or tag is wrong.
        """
        kind = wire.KIND_SEED if seeded else wire.KIND_VALUES
        frame = wire.unpack(
            blob,
            key=key,
            kind=kind,
            party=check_party(party),
            label=label,
            max_count=max_count,
            count=count,
        )
        if frame.frac_bits > 62:
            raise ShareTampered(f"share blob frac_bits {frame.frac_bits} is out of range")
        if seeded:
            return cls.from_seed(
                frame.payload, label=label, count=frame.count, frac_bits=frame.frac_bits
            )
        return cls.from_values(frame.words(), label=label, party=party, frac_bits=frame.frac_bits)


def _check_frac(frac_bits: int) -> int:
    if not isinstance(frac_bits, int) or not 0 <= frac_bits <= 62:
        raise ParameterInvalid(f"frac_bits must be an int in [0, 62], got {frac_bits!r}")
    return frac_bits


def reconstruct(first: ShareBundle | RingArray, second: ShareBundle | RingArray) -> RingArray:
    """Add two shares back into the secret ring elements.

    Parameters
    ----------
    first, second
        Either two :class:`ShareBundle` (verified by :meth:`ShareBundle.parse`)
        or two ``uint64`` arrays of one shape.

    Returns
    -------
    numpy.ndarray
        ``first + second (mod 2^64)``; flat for bundles.

    Raises
    ------
    ShareTampered
        If two bundles do not belong together: different labels, the same party
        twice, different lengths or fractional bits (swapped or mixed shares).
    ParameterInvalid
        If the arguments are neither two bundles nor two ring arrays.
    """
    if isinstance(first, ShareBundle) and isinstance(second, ShareBundle):
        _check_pair(first, second)
        return first.values() + second.values()
    if isinstance(first, ShareBundle) or isinstance(second, ShareBundle):
        raise ParameterInvalid("reconstruct takes two ShareBundle or two ring arrays, not a mix")
    a = as_ring(first, name="first")
    b = as_ring(second, name="second")
    same_shape(a, b, what="reconstruct")
    return a + b


def _check_pair(first: ShareBundle, second: ShareBundle) -> None:
    if first.label != second.label:
        raise ShareTampered("shares carry different labels (round, participant or tensor)")
    if {first.party, second.party} != {0, 1}:
        raise ShareTampered(f"shares are for parties {first.party} and {second.party}, not 0 and 1")
    if first.count != second.count:
        raise ShareTampered(f"share lengths differ: {first.count} vs {second.count}")
    if first.frac_bits != second.frac_bits:
        raise ShareTampered("shares carry different fractional bits")
    logger.debug("reconstructing %d values of %s", first.count, first.label.tensor)


@dataclass(frozen=True)
class WireSizes:
    """Upload sizes of one participant's shared tensor in shares mode.

    Attributes
    ----------
    to_party0, to_party1
        Bytes of the blob sent to each server (header and tag included).
    total
        Sum of both.
    per_value
        ``total / count``.
    """

    to_party0: int
    to_party1: int
    total: int
    per_value: float


def wire_bytes_per_value(
    count: int, *, seeded: bool = True, label: ShareLabel | None = None
) -> WireSizes:
    """Return the exact wire sizes of a participant's upload of ``count`` values.

    Parameters
    ----------
    count
        Number of ring elements shared (e.g. ``N_pub * C``).
    seeded
        True when party 1 receives a 32-byte seed (the default upload).
    label
        Label used for the header size; a typical one when None.

    Raises
    ------
    ParameterInvalid
        If ``count < 1``.
    """
    if count < 1:
        raise ParameterInvalid(f"count must be >= 1, got {count}")
    if label is None:
        label = ShareLabel(round_id=0, participant_id="participant-0000", tensor="predictions")
    overhead = wire.frame_overhead(label)
    to0 = overhead + wire.payload_size(wire.KIND_VALUES, count)
    kind1 = wire.KIND_SEED if seeded else wire.KIND_VALUES
    to1 = overhead + wire.payload_size(kind1, count)
    return WireSizes(to_party0=to0, to_party1=to1, total=to0 + to1, per_value=(to0 + to1) / count)
