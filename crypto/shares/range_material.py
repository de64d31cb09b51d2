"""Public parameters, cost and dealt material of the range check on shares.

The protocol is in :mod:`crypto.shares.range_check` (docs/crypto-shares.md, section 7).
The dealer deals, per value, a uniform ``r`` in Z_2^64 as additive shares and
as XOR-shared bits (an *edaBit*, Escudero et al., CRYPTO 2020) plus Beaver AND
triples on bit-sliced words. With ``y = v - lower`` and ``K = upper - lower + 1``
the value is valid iff ``y < K`` (unsigned). The servers open ``c = y + r``
(uniform) and evaluate, following Rabbit (Makri et al., FC 2021),

    [y < K] = [c < K] xor [c < r] xor [c - K < r]        (all mod 2^64),

where ``[c < K]`` is public and each ``[x < r]`` is a comparison of a public
``x`` with shared bits: leaves are local, a log-depth prefix tree (``prefix``,
6 AND layers, 125 AND gates per comparison) or a ripple chain (``ripple``, 63
layers, 63 gates) combines them. The AND of the verdicts over all values is a
tree of word ANDs; only that one bit is opened. Exact: no soundness error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from crypto.errors import ParameterInvalid, ShareTampered
from crypto.shares import wire
from crypto.shares._ring import RING_BITS, RingArray, check_party
from crypto.shares.bitslice import Words, bitslice, words_for
from crypto.shares.codec import RING_PREDICTIONS, FixedPointCodec
from crypto.shares.prg import SEED_BYTES, ShareLabel, keystream, new_seed

LAYOUTS = ("prefix", "ripple")
_LIMIT = 1 << 62
_SEED_WORDS = SEED_BYTES // 8
_HEAD_WORDS = _SEED_WORDS + 1  # party 1's payload: seed, value count, then the explicit words
MAX_TENSOR_BYTES = 120
"""Longest check name: message labels append ``/<step>`` within the 128-byte label field."""


@dataclass(frozen=True, kw_only=True)
class RangeSpec:
    """Public parameters of a range check: the inclusive interval and the circuit layout.

    Parameters
    ----------
    lower, upper
        Signed integer bounds of a valid ring value, ``-2^62 < lower <= upper < 2^62``.
    layout
        ``"prefix"`` (log-depth comparison, 6 AND layers) or ``"ripple"`` (63 layers,
        half the AND gates).
    each
        False (default): one bit is opened, the AND of every value's verdict.
        True: one bit per value is opened (its own verdict; no AND tree), e.g. one
        "within the threshold" bit per pair distance.

    Raises
    ------
    ParameterInvalid
        If a bound or the layout is out of range.
    """

    lower: int
    upper: int
    layout: str = "prefix"
    each: bool = False

    def __post_init__(self) -> None:
        for name in ("lower", "upper"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or abs(value) >= _LIMIT:
                raise ParameterInvalid(f"{name} must be an int with |{name}| < 2^62, got {value!r}")
        if self.lower > self.upper:
            raise ParameterInvalid(f"lower {self.lower} exceeds upper {self.upper}")
        if self.layout not in LAYOUTS:
            raise ParameterInvalid(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if not isinstance(self.each, bool):
            raise ParameterInvalid(f"each must be a bool, got {self.each!r}")

    @classmethod
    def for_codec(cls, codec: FixedPointCodec, *, layout: str = "prefix") -> RangeSpec:
        """Return the spec of ``codec``'s clip bound: ``[-B * 2^f, B * 2^f]``."""
        return cls(lower=-codec.bound_int, upper=codec.bound_int, layout=layout)

    @property
    def width(self) -> int:
        """``K = upper - lower + 1``: valid iff ``v - lower < K`` unsigned."""
        return self.upper - self.lower + 1

    def domain(self) -> bytes:
        """PRG domain of this spec's material (binds bounds, layout and the verdicts opened)."""
        tail = "/each" if self.each else ""
        return f"range/{self.lower}/{self.upper}/{self.layout}{tail}".encode()

    def comparison_layers(self) -> list[int]:
        """AND words per comparison layer, per ``W`` words (two comparisons in parallel)."""
        if self.layout == "ripple":
            return [2] * (RING_BITS - 1)
        groups, out = RING_BITS, []
        while groups > 1:
            out.append(2 * (groups // 2) * (1 if groups == 2 else 2))
            groups //= 2
        return out

    def and_layers(self, count: int) -> list[int]:
        """Return the AND words of every layer of the circuit for ``count`` values."""
        width = words_for(count)
        layers = [k * width for k in self.comparison_layers()]
        if self.each:  # every value's verdict is opened: no AND tree
            return layers
        while width > 1:
            layers.append(width // 2)
            width = width // 2 + width % 2
        return layers + [1] * 6


RANGE_PREDICTIONS = RangeSpec.for_codec(RING_PREDICTIONS)
"""Range of :data:`~crypto.shares.codec.RING_PREDICTIONS`: ``[-2^15, 2^15]``."""


@dataclass(frozen=True)
class RangeCost:
    """Exact cost of one range check of ``count`` values.

    Attributes
    ----------
    and_gates
        Boolean AND gates (64 per word).
    rounds
        Messages each party sends (mask, one per AND layer, output bit): the
        sequential server-to-server round trips of a deployment.
    dealer_bytes
        ``(to party 0, to party 1)`` wire bytes of the dealt material.
    exchange_bytes
        Bytes each server sends the other during the check.
    """

    and_gates: int
    rounds: int
    dealer_bytes: tuple[int, int]
    exchange_bytes: int


def range_cost(count: int, *, spec: RangeSpec = RANGE_PREDICTIONS, label: ShareLabel) -> RangeCost:
    """Return the exact :class:`RangeCost` of checking ``count`` values under ``spec``."""
    layers = spec.and_layers(count)
    sizes = [8 * count, *(16 * m for m in layers), 8 * (words_for(count) if spec.each else 1)]
    exchanged = sum(wire.frame_overhead(_step_label(label, i)) + n for i, n in enumerate(sizes))
    total = sum(layers)
    explicit = _HEAD_WORDS + RING_BITS * words_for(count) + total
    base = wire.frame_overhead(label)
    return RangeCost(
        and_gates=64 * total,
        rounds=len(layers) + 2,
        dealer_bytes=(base + SEED_BYTES, base + 8 * explicit),
        exchange_bytes=exchanged,
    )


def _step_label(label: ShareLabel, step: int) -> ShareLabel:
    return ShareLabel(
        round_id=label.round_id,
        participant_id=label.participant_id,
        tensor=f"{label.tensor}/{step}",
    )


def _words(stream: bytes) -> Words:
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64)


@dataclass(frozen=True, kw_only=True, eq=False)
class RangeMaterial:
    """One party's dealt material for one range check; ``repr`` hides every secret.

    Party 0 holds a 32-byte seed; party 1 a seed plus its bit shares of ``r`` and its
    AND-triple ``c`` shares. Build with :func:`deal_range_check`, move with
    :meth:`to_bytes` / :meth:`parse`.
    """

    label: ShareLabel
    party: int
    count: int
    spec: RangeSpec
    _seed: bytes = field(repr=False)
    _explicit: Words | None = field(default=None, repr=False)

    def parts(self) -> tuple[RingArray, Words, Words, Words, Words]:
        """Return ``(r_i, r_bits_i (64, W), a_i, b_i, c_i)`` of this party."""
        width, gates = words_for(self.count), sum(self.spec.and_layers(self.count))
        bit_words = RING_BITS * width
        if self.party == 0:
            raw = _expand(self._seed, self, self.count + bit_words + 3 * gates)
            r, rest = raw[: self.count], raw[self.count :]
            bits, a, b, c = np.split(rest, [bit_words, bit_words + gates, bit_words + 2 * gates])
            return r, bits.reshape(RING_BITS, width), a, b, c
        if self._explicit is None:
            raise ParameterInvalid("party 1 range material needs its explicit part")
        raw = _expand(self._seed, self, self.count + 2 * gates)
        r, a, b = np.split(raw, [self.count, self.count + gates])
        bits, c = self._explicit[:bit_words], self._explicit[bit_words:]
        return r, bits.reshape(RING_BITS, width), a, b, c

    def to_bytes(self, key: wire.ShareMacKey) -> bytes:
        """Serialize with the share framing and an HMAC-SM3 tag under the recipient's ``key``."""
        if self.party == 0:
            kind, count, payload = wire.KIND_SEED, self.count, self._seed
        else:
            assert self._explicit is not None
            kind, count = wire.KIND_VALUES, _HEAD_WORDS + self._explicit.size
            values = np.concatenate([np.array([self.count], dtype=np.uint64), self._explicit])
            payload = self._seed + values.astype("<u8").tobytes()
        return wire.seal(
            key, kind=kind, party=self.party, count=count, label=self.label, payload=payload
        )

    @classmethod
    def parse(
        cls,
        blob: bytes,
        *,
        key: wire.ShareMacKey,
        label: ShareLabel,
        party: int,
        count: int,
        spec: RangeSpec = RANGE_PREDICTIONS,
    ) -> RangeMaterial:
        """Parse and verify untrusted dealer bytes for ``count`` values.

        Raises
        ------
        ShareTampered
            If the size, kind, party, label, count or tag is wrong.
        """
        gates = sum(spec.and_layers(count))
        size = count if party == 0 else _HEAD_WORDS + RING_BITS * words_for(count) + gates
        kind = wire.KIND_SEED if check_party(party) == 0 else wire.KIND_VALUES
        frame = wire.unpack(blob, key=key, kind=kind, party=party, label=label, count=size)
        if party == 0:
            return cls(label=label, party=0, count=count, spec=spec, _seed=frame.payload)
        words = _words(frame.payload[SEED_BYTES:])
        if int(words[0]) != count:
            raise ShareTampered(f"range material is for {int(words[0])} values, expected {count}")
        explicit, seed = words[1:], frame.payload[:SEED_BYTES]
        return cls(label=label, party=1, count=count, spec=spec, _seed=seed, _explicit=explicit)


def _expand(seed: bytes, material: RangeMaterial, words: int) -> Words:
    domain = material.spec.domain() + b"/" + bytes([material.party])
    return _words(keystream(seed, domain, material.label, 8 * words))


def deal_range_check(
    count: int, *, label: ShareLabel, spec: RangeSpec = RANGE_PREDICTIONS
) -> tuple[RangeMaterial, RangeMaterial]:
    """Deal the material of one range check of ``count`` values (the dealer's side).

    Parameters
    ----------
    count
        Number of shared values to check (``N_pub * C``).
    label
        Names the check (both servers use the same); its tensor is at most 120 bytes.
    spec
        Bounds and layout.

    Returns
    -------
    tuple of RangeMaterial
        For party 0 and party 1. Randomness from :func:`secrets.token_bytes` seeds.
    """
    if len(label.tensor.encode()) > MAX_TENSOR_BYTES:
        raise ParameterInvalid(f"range-check tensor name must be at most {MAX_TENSOR_BYTES} bytes")
    width = words_for(count)
    m0 = RangeMaterial(label=label, party=0, count=count, spec=spec, _seed=new_seed())
    seed1 = new_seed()
    r0, bits0, a0, b0, c0 = m0.parts()
    gates = a0.size
    raw1 = _expand(
        seed1,
        RangeMaterial(label=label, party=1, count=count, spec=spec, _seed=seed1),
        count + 2 * gates,
    )
    r1, a1, b1 = np.split(raw1, [count, count + gates])
    bits1 = bitslice(r0 + r1) ^ bits0
    c1 = ((a0 ^ a1) & (b0 ^ b1)) ^ c0
    explicit = np.concatenate([bits1.reshape(-1), c1])
    assert explicit.size == RING_BITS * width + gates
    m1 = RangeMaterial(
        label=label, party=1, count=count, spec=spec, _seed=seed1, _explicit=explicit
    )
    return m0, m1
