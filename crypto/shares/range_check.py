"""Range check on additive shares: every shared value lies in a public ``[lower, upper]``.

Dealer-assisted, bit-sliced boolean circuit (docs/crypto-shares.md, section 7).
The dealer (:func:`~crypto.shares.range_material.deal_range_check`) deals, per
value, a uniform ``r`` in Z_2^64 as additive shares and as XOR-shared bits (an
*edaBit*, Escudero et al., CRYPTO 2020) plus Beaver AND triples on bit-sliced
words. With ``y = v - lower`` and ``K = upper - lower + 1`` a value is valid iff
``y < K`` (unsigned). The servers open ``c = y + r`` (uniform) and evaluate,
as in Rabbit (Makri, Rotaru, Vercauteren, Smart, FC 2021),

    [y < K] = [c < K] xor [c < r] xor [(c - K) < r]        (all mod 2^64),

where ``[c < K]`` is public and each ``[x < r]`` compares a public ``x`` with
shared bits: the per-bit leaves are local and a log-depth prefix tree (or a
ripple chain) combines them. The AND of the verdicts of all values is a tree
of word ANDs, and only that one bit is opened. The check is exact: an
out-of-range value is rejected with certainty (soundness error 0) when both
servers follow the protocol. With ``RangeSpec(each=True)`` there is no AND
tree: each value's verdict is opened (one bit per value, :attr:`RangeCheckParty.verdicts`),
as a threshold comparison of many hidden values needs.
"""

from __future__ import annotations

import logging
from collections.abc import Generator

import numpy as np

from crypto.errors import ParameterInvalid, SharesOutOfRange
from crypto.shares import wire
from crypto.shares._ring import RING_BITS, RingArray, as_ring, to_ring_int
from crypto.shares.bitslice import (
    ALL_ONES,
    Words,
    and_finish,
    and_open,
    bitslice,
    pack_lanes,
    padding_mask,
    unpack_lanes,
    words_for,
    xor_public,
)
from crypto.shares.prg import ShareLabel
from crypto.shares.range_material import (
    RANGE_PREDICTIONS,
    RangeCost,
    RangeMaterial,
    RangeSpec,
    deal_range_check,
    range_cost,
)

__all__ = [
    "RANGE_PREDICTIONS",
    "RangeCheckParty",
    "RangeCost",
    "RangeMaterial",
    "RangeSpec",
    "deal_range_check",
    "range_check",
    "range_cost",
    "range_verdicts",
    "require_in_range",
]

logger = logging.getLogger(__name__)

Circuit = Generator[tuple[Words, Words], Words, Words]
_ONE = np.uint64(1)


def _less_than(party: int, public: Words, r_bits: Words, layout: str) -> Circuit:
    """Shares of ``[x < r]`` per lane, for public bit-sliced ``x`` of shape ``(k, 64, W)``."""
    not_x = ~public
    lt = r_bits[None] & not_x  # bit i decides: x_i = 0, r_i = 1
    eq = xor_public(np.broadcast_to(r_bits[None], public.shape), not_x, party=party)
    if layout == "ripple":
        acc = lt[:, 0]
        for i in range(1, RING_BITS):
            z = yield eq[:, i].reshape(-1), acc.reshape(-1)
            acc = lt[:, i] ^ z.reshape(acc.shape)
        return acc
    while lt.shape[1] > 1:
        last = lt.shape[1] == 2
        hi_eq = eq[:, 1::2]
        left = hi_eq if last else np.concatenate([hi_eq, hi_eq])
        right = lt[:, 0::2] if last else np.concatenate([lt[:, 0::2], eq[:, 0::2]])
        z = (yield left.reshape(-1), right.reshape(-1)).reshape(left.shape)
        lt, eq = lt[:, 1::2] ^ z[: len(public)], z[len(public) :]
    return lt[:, 0]


def _and_all(party: int, flags: Words) -> Circuit:
    """Share of the AND of every lane of every word (one bit, in lane 0)."""
    words = flags
    while words.size > 1:
        half = words.size // 2
        z = yield words[:half], words[half : 2 * half]
        words = np.concatenate([z, words[2 * half :]])
    for shift in (32, 16, 8, 4, 2, 1):
        words = yield words, words >> np.uint64(shift)
    return words & _ONE


def _circuit(party: int, spec: RangeSpec, c: RingArray, r_bits: Words) -> Circuit:
    """One party's side of the whole check, given the opened ``c = y + r``."""
    shifted = c - to_ring_int(spec.width)
    public = np.stack([bitslice(c), bitslice(shifted)])
    lt = yield from _less_than(party, public, r_bits, spec.layout)
    flags = xor_public(lt[0] ^ lt[1], pack_lanes(c < np.uint64(spec.width)), party=party)
    pad = padding_mask(c.size)
    flags[-1] = (flags[-1] | pad) if party == 0 else (flags[-1] & ~pad & ALL_ONES)
    if spec.each:  # every value's verdict is opened
        return flags
    return (yield from _and_all(party, flags))


class RangeCheckParty:
    """One server's side of a range check: a state machine exchanging tagged messages.

    Parameters
    ----------
    material
        This party's :class:`RangeMaterial`, consumed by one check.
    channel_key
        MAC key the two servers share for their messages.
    keep_shared
        With ``RangeSpec(each=True)`` only: open nothing; the check ends with
        each party holding its XOR share of every value's verdict
        (:attr:`verdict_shares`), for a computation that goes on on shares
        (e.g. counting the verdicts before opening only the counts).

    Notes
    -----
    :meth:`start` returns message 0; every :meth:`advance` takes the peer's
    message ``i`` and returns this party's message ``i + 1``, or ``None`` once
    the verdict is known (:attr:`valid`). Each message is a share frame labelled
    ``<check>/<i>`` and tagged, so reordered, replayed, reflected or altered
    messages raise ``ShareTampered``; calls out of order raise ``ParameterInvalid``.
    """

    def __init__(
        self,
        *,
        material: RangeMaterial,
        channel_key: wire.ShareMacKey,
        keep_shared: bool = False,
    ) -> None:
        if not isinstance(material, RangeMaterial):
            raise ParameterInvalid("material must be a RangeMaterial")
        if keep_shared and not material.spec.each:
            raise ParameterInvalid("keep_shared needs per-value verdicts (RangeSpec(each=True))")
        self._keep_shared = bool(keep_shared)
        self._material, self._key = material, channel_key
        self._stage, self._step = "ready", 0
        self._circuit: Circuit | None = None
        self._pending: tuple[Words, Words, tuple[Words, Words, Words]] | None = None
        self._masked: RingArray | None = None
        self._used, self._out = 0, np.zeros(1, dtype=np.uint64)
        self._verdicts = np.zeros(0, dtype=bool)
        self._r_bits: Words | None = None
        self._triples: tuple[Words, Words, Words] | None = None

    @property
    def party(self) -> int:
        """Party index (0 or 1)."""
        return self._material.party

    @property
    def stage(self) -> str:
        """``ready``, ``masked``, ``circuit``, ``output`` or ``done``."""
        return self._stage

    @property
    def valid(self) -> bool:
        """The verdict: True iff every value is within the bounds."""
        return bool(self.verdicts.all())

    @property
    def verdicts(self) -> np.ndarray:
        """One verdict per value (``RangeSpec(each=True)``); otherwise the one AND verdict."""
        if self._stage != "done" or self._keep_shared:
            raise ParameterInvalid(f"no verdict in stage {self._stage!r} (or kept shared)")
        return self._verdicts.copy()

    @property
    def verdict_shares(self) -> np.ndarray:
        """Return this party's XOR share of each value's verdict (``keep_shared`` only)."""
        if self._stage != "done" or not self._keep_shared:
            raise ParameterInvalid(f"no verdict shares in stage {self._stage!r}")
        return self._verdicts.copy()

    def start(self, share: RingArray) -> bytes:
        """Return message 0: this party's share of ``c = (v - lower) + r``."""
        if self._stage != "ready":
            raise ParameterInvalid(f"start called in stage {self._stage!r}; material is single-use")
        values = as_ring(share, name="share").reshape(-1)
        if values.size != self._material.count:
            raise ParameterInvalid(
                f"share has {values.size} values, material {self._material.count}"
            )
        r, r_bits, a, b, c = self._material.parts()
        self._r_bits, self._triples = r_bits, (a, b, c)
        shift = to_ring_int(-self._material.spec.lower) if self.party == 0 else np.uint64(0)
        self._masked = values + shift + r
        self._stage = "masked"
        return self._send(self._masked)

    def advance(self, peer_message: bytes) -> bytes | None:
        """Consume the peer's current message; return the next one, or None when done."""
        if self._stage in ("ready", "done"):
            raise ParameterInvalid(f"advance called in stage {self._stage!r}")
        words = self._receive(peer_message)
        if self._stage == "masked":
            assert self._masked is not None and self._r_bits is not None
            opened = self._masked + words
            self._circuit = _circuit(self.party, self._material.spec, opened, self._r_bits)
            self._stage, self._masked = "circuit", None
            return self._drive(None)
        if self._stage == "circuit":
            return self._drive(self._finish_and(words))
        opened = self._out ^ words
        if self._material.spec.each:
            self._verdicts = unpack_lanes(opened, self._material.count)
        else:
            self._verdicts = np.array([bool(int(opened[0] & _ONE))])
        self._stage = "done"
        logger.debug("range check %s: verdict reached", self._material.label.tensor)
        return None

    def _drive(self, result: Words | None) -> bytes | None:
        assert self._circuit is not None
        try:
            x, y = self._circuit.send(result)  # type: ignore[arg-type]
        except StopIteration as stop:
            if self._used != self._triples[0].size:  # type: ignore[index]
                raise ParameterInvalid("dealt AND triples do not match the circuit") from None
            out = stop.value.reshape(-1)
            if self._keep_shared:  # nothing is opened: keep this party's XOR shares
                self._verdicts = unpack_lanes(out, self._material.count)
                self._stage, self._triples = "done", None
                return None
            self._out = out if self._material.spec.each else out[:1]
            self._stage, self._triples = "output", None
            return self._send(self._out)
        assert self._triples is not None
        lo, hi = self._used, self._used + x.size
        if hi > self._triples[0].size:
            raise ParameterInvalid("the circuit needs more AND triples than were dealt")
        triple = (self._triples[0][lo:hi], self._triples[1][lo:hi], self._triples[2][lo:hi])
        self._used = hi
        d, e = and_open(x, y, triple[0], triple[1])
        self._pending = (d, e, triple)
        return self._send(np.concatenate([d, e]))

    def _finish_and(self, peer: Words) -> Words:
        assert self._pending is not None
        d, e, triple = self._pending
        self._pending = None
        return and_finish(d ^ peer[: d.size], e ^ peer[d.size :], triple, party=self.party)

    def _label(self, step: int) -> ShareLabel:
        base = self._material.label
        return ShareLabel(
            round_id=base.round_id,
            participant_id=base.participant_id,
            tensor=f"{base.tensor}/{step}",
        )

    def _send(self, words: Words) -> bytes:
        return wire.seal(
            self._key,
            kind=wire.KIND_VALUES,
            party=self.party,
            count=words.size,
            label=self._label(self._step),
            payload=words,
        )

    def _expected(self) -> int:
        if self._stage == "masked":
            return self._material.count
        if self._stage == "circuit":
            assert self._pending is not None
            return 2 * self._pending[0].size
        return words_for(self._material.count) if self._material.spec.each else 1

    def _receive(self, blob: bytes) -> Words:
        frame = wire.unpack(
            blob,
            key=self._key,
            kind=wire.KIND_VALUES,
            party=1 - self.party,
            label=self._label(self._step),
            count=self._expected(),
        )
        self._step += 1
        return frame.words()


def range_check(
    shares: tuple[RingArray, RingArray],
    *,
    label: ShareLabel,
    channel_key: wire.ShareMacKey,
    spec: RangeSpec = RANGE_PREDICTIONS,
) -> bool:
    """Deal and run both parties in-process (messages as bytes); return the verdict.

    With ``spec.each`` the verdict is True iff every value is in range
    (:func:`range_verdicts` returns them one by one).

    Parameters
    ----------
    shares
        ``(share0, share1)`` of the values to check.
    label
        Names this check; material and messages are bound to it.
    channel_key
        MAC key of the server-to-server channel.
    spec
        Bounds and layout.
    """
    return bool(range_verdicts(shares, label=label, channel_key=channel_key, spec=spec).all())


def range_verdicts(
    shares: tuple[RingArray, RingArray],
    *,
    label: ShareLabel,
    channel_key: wire.ShareMacKey,
    spec: RangeSpec = RANGE_PREDICTIONS,
) -> np.ndarray:
    """Deal and run both parties in-process; return the opened verdicts.

    One boolean per value when ``spec.each``, else one (the AND of all).
    """
    count = as_ring(shares[0], name="share0").size
    m0, m1 = deal_range_check(count, label=label, spec=spec)
    p0 = RangeCheckParty(material=m0, channel_key=channel_key)
    p1 = RangeCheckParty(material=m1, channel_key=channel_key)
    out0, out1 = p0.start(shares[0]), p1.start(shares[1])
    while True:
        next0, next1 = p0.advance(out1), p1.advance(out0)
        if next0 is None or next1 is None:
            break
        out0, out1 = next0, next1
    if not np.array_equal(p0.verdicts, p1.verdicts):
        raise ParameterInvalid("the two parties reached different verdicts")
    return p0.verdicts


def require_in_range(
    shares: tuple[RingArray, RingArray],
    *,
    label: ShareLabel,
    channel_key: wire.ShareMacKey,
    spec: RangeSpec = RANGE_PREDICTIONS,
) -> None:
    """Run :func:`range_check` and raise :class:`SharesOutOfRange` on a negative verdict."""
    if not range_check(shares, label=label, channel_key=channel_key, spec=spec):
        raise SharesOutOfRange(
            f"{label.tensor}: a shared value lies outside [{spec.lower}, {spec.upper}]"
        )
