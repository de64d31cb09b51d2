"""Beaver-triple multiplication of additive shares over Z_2^64.

Beaver, "Efficient multiparty protocols using circuit randomization",
CRYPTO 1991. A dealer (the key authority, which holds no shares) deals
``c = a * b`` for uniform ``a, b``; to multiply shared ``x`` and ``y`` each
party opens ``d_i = x_i - a_i`` and ``e_i = y_i - b_i``, both learn ``d = x - a``
and ``e = y - b`` (uniform, so they reveal nothing about ``x``, ``y``), and set
``z_i = c_i + d * b_i + e * a_i`` (+ ``d * e`` for party 0), so
``z_0 + z_1 = x * y``. Every triple is used once; a party refuses reuse.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from crypto.errors import ParameterInvalid
from crypto.shares import wire
from crypto.shares._ring import RingArray, as_ring, check_party, random_ring, same_shape
from crypto.shares.linear import truncate
from crypto.shares.prg import ShareLabel, keystream, new_seed

logger = logging.getLogger(__name__)

STAGE_READY = "ready"
STAGE_OPENED = "opened"
STAGE_DONE = "done"


def _split3(raw: RingArray, count: int) -> tuple[RingArray, RingArray, RingArray]:
    return raw[:count], raw[count : 2 * count], raw[2 * count :]


def _expand_triple(seed: bytes, label: ShareLabel, count: int) -> tuple[RingArray, ...]:
    stream = keystream(seed, b"triple", label, 24 * count)
    return _split3(np.frombuffer(stream, dtype="<u8").astype(np.uint64), count)


@dataclass(frozen=True, kw_only=True, eq=False)
class TripleShare:
    """One party's share of ``count`` Beaver triples, explicit or as a 32-byte seed.

    ``repr`` never shows the triple values or the seed.
    """

    label: ShareLabel
    party: int
    count: int
    _abc: tuple[RingArray, RingArray, RingArray] | None = field(default=None, repr=False)
    _seed: bytes | None = field(default=None, repr=False)

    def parts(self) -> tuple[RingArray, RingArray, RingArray]:
        """Return this party's flat shares ``(a_i, b_i, c_i)``."""
        if self._seed is not None:
            a, b, c = _expand_triple(self._seed, self.label, self.count)
            return a, b, c
        if self._abc is None:
            raise ParameterInvalid("triple share holds neither values nor a seed")
        return self._abc

    def to_bytes(self, key: wire.ShareMacKey) -> bytes:
        """Serialize for the dealer-to-party channel, tagged under ``key``."""
        seeded = self._seed is not None
        return wire.seal(
            key,
            kind=wire.KIND_TRIPLE_SEED if seeded else wire.KIND_TRIPLE,
            party=self.party,
            count=self.count,
            label=self.label,
            payload=self._seed if self._seed is not None else np.concatenate(self.parts()),
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
    ) -> TripleShare:
        """Parse and verify an untrusted triple blob from the dealer.

        Raises
        ------
        ShareTampered
            If the size, ring id, kind, party, label or tag is wrong.
        """
        kind = wire.KIND_TRIPLE_SEED if seeded else wire.KIND_TRIPLE
        frame = wire.unpack(
            blob,
            key=key,
            kind=kind,
            party=check_party(party),
            label=label,
            max_count=max_count,
            count=count,
        )
        if seeded:
            return cls(label=label, party=party, count=frame.count, _seed=frame.payload)
        raw = frame.words()
        return cls(label=label, party=party, count=frame.count, _abc=_split3(raw, frame.count))


def deal_triples(
    count: int, *, label: ShareLabel, seeded: bool = False
) -> tuple[TripleShare, TripleShare]:
    """Deal ``count`` Beaver triples ``c = a * b`` as two party bundles.

    Parameters
    ----------
    count
        Number of elementwise multiplications the triples serve.
    label
        Names the multiplication (round, computation, tensor); both parties
        must use the same label.
    seeded
        When True, party 0 receives only a 32-byte seed for ``(a0, b0, c0)``,
        which halves the dealer's traffic.

    Returns
    -------
    tuple of TripleShare
        Bundles for party 0 and party 1. Randomness comes from ``os.urandom``.
    """
    if count < 1:
        raise ParameterInvalid(f"count must be >= 1, got {count}")
    a, b = random_ring(count), random_ring(count)
    c = a * b
    if seeded:
        seed = new_seed()
        a0, b0, c0 = _expand_triple(seed, label, count)
        share0 = TripleShare(label=label, party=0, count=count, _seed=seed)
    else:
        a0, b0, c0 = random_ring(count), random_ring(count), random_ring(count)
        share0 = TripleShare(label=label, party=0, count=count, _abc=(a0, b0, c0))
    share1 = TripleShare(label=label, party=1, count=count, _abc=(a - a0, b - b0, c - c0))
    logger.debug("dealt %d triples for %s (seeded=%s)", count, label.tensor, seeded)
    return share0, share1


class BeaverParty:
    """One server's side of a Beaver multiplication: a two-message state machine.

    Parameters
    ----------
    triples
        This party's :class:`TripleShare`; consumed by one multiplication.
    channel_key
        MAC key the two servers share for their openings.

    Notes
    -----
    Stages: ``ready`` -> :meth:`open` -> ``opened`` -> :meth:`finish` -> ``done``.
    Calling out of order, or reusing the triples, raises ``ParameterInvalid``.
    """

    def __init__(self, *, triples: TripleShare, channel_key: wire.ShareMacKey) -> None:
        if not isinstance(triples, TripleShare):
            raise ParameterInvalid("triples must be a TripleShare")
        self._triples = triples
        self._key = channel_key
        self._stage = STAGE_READY
        self._masked: tuple[RingArray, RingArray] | None = None
        self._shape: tuple[int, ...] = ()

    @property
    def stage(self) -> str:
        """Current protocol stage."""
        return self._stage

    @property
    def party(self) -> int:
        """Party index (0 or 1)."""
        return self._triples.party

    def open(self, x_share: RingArray, y_share: RingArray) -> bytes:
        """Return the tagged message carrying ``d_i = x_i - a_i`` and ``e_i = y_i - b_i``.

        Raises
        ------
        ParameterInvalid
            If called twice, or the shares do not match the triple count.
        """
        if self._stage != STAGE_READY:
            raise ParameterInvalid(f"open called in stage {self._stage!r}; triples are single-use")
        x, y = as_ring(x_share, name="x_share"), as_ring(y_share, name="y_share")
        same_shape(x, y, what="BeaverParty.open")
        if x.size != self._triples.count:
            raise ParameterInvalid(f"shares have {x.size} elements, triples {self._triples.count}")
        a, b, _ = self._triples.parts()
        d_i, e_i = x.reshape(-1) - a, y.reshape(-1) - b
        self._masked, self._shape, self._stage = (d_i, e_i), x.shape, STAGE_OPENED
        return wire.seal(
            self._key,
            kind=wire.KIND_OPENING,
            party=self.party,
            count=x.size,
            label=self._triples.label,
            payload=np.concatenate([d_i, e_i]),
        )

    def finish(self, peer_message: bytes) -> RingArray:
        """Combine the peer's opening and return this party's share of ``x * y``.

        Raises
        ------
        ShareTampered
            If the peer message is malformed, reflected, relabelled or altered.
        ParameterInvalid
            If called before :meth:`open` or twice.
        """
        if self._stage != STAGE_OPENED or self._masked is None:
            raise ParameterInvalid(f"finish called in stage {self._stage!r}; call open first")
        count = self._triples.count
        frame = wire.unpack(
            peer_message,
            key=self._key,
            kind=wire.KIND_OPENING,
            party=1 - self.party,
            label=self._triples.label,
            count=count,
        )
        peer = frame.words()
        d = self._masked[0] + peer[:count]
        e = self._masked[1] + peer[count:]
        a, b, c = self._triples.parts()
        z = c + d * b + e * a
        if self.party == 0:
            z = z + d * e
        self._stage, self._masked = STAGE_DONE, None
        result: RingArray = z.reshape(self._shape)
        return result


def secure_multiply(
    x: tuple[RingArray, RingArray],
    y: tuple[RingArray, RingArray],
    triples: tuple[TripleShare, TripleShare],
    *,
    channel_key: wire.ShareMacKey,
    truncate_bits: int = 0,
) -> tuple[RingArray, RingArray]:
    """Run both parties of one Beaver multiplication in-process, messages as bytes.

    Parameters
    ----------
    x, y
        ``(share0, share1)`` of each factor.
    triples
        ``(party0, party1)`` bundles from :func:`deal_triples`.
    channel_key
        MAC key of the server-to-server channel.
    truncate_bits
        When > 0, each party truncates its product share locally by this many bits.

    Returns
    -------
    tuple of numpy.ndarray
        ``(z0, z1)`` with ``z0 + z1 = x * y`` (then truncated if asked).
    """
    p0 = BeaverParty(triples=triples[0], channel_key=channel_key)
    p1 = BeaverParty(triples=triples[1], channel_key=channel_key)
    if p0.party != 0 or p1.party != 1:
        raise ParameterInvalid("triples must be given as (party 0, party 1)")
    m0, m1 = p0.open(x[0], y[0]), p1.open(x[1], y[1])
    z0, z1 = p0.finish(m1), p1.finish(m0)
    if truncate_bits:
        z0, z1 = truncate(z0, truncate_bits, party=0), truncate(z1, truncate_bits, party=1)
    return z0, z1
