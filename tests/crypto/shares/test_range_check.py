"""The range check on shares: exact at the bound, rejects crafted shares, reveals one bit.

Every value of an upload must lie in ``[-B * 2^f, B * 2^f] = [-2^15, 2^15]``; the
two servers decide it on their shares. The statistical tests at the bottom use the
same statistics (and threshold) as ``test_uniformity.py`` and show they reject a view
that carries the values, so they can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from crypto.errors import ParameterInvalid, SharesOutOfRange, ShareTampered
from crypto.shares import (
    RING_PREDICTIONS,
    RangeCheckParty,
    RangeMaterial,
    RangeSpec,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
    deal_range_check,
    range_check,
    range_cost,
    reconstruct,
    require_in_range,
    split,
    split_with_seed,
)
from crypto.shares.bitslice import bitslice, pack_lanes, unbitslice, unpack_lanes

CODEC = RING_PREDICTIONS
BOUND = CODEC.bound_int  # 2^15
RING = 1 << 64
LABEL = ShareLabel(round_id=3, participant_id="range-check", tensor="upload-1")
CHANNEL = ShareMacKey.derive(bytes(range(40)), recipient="aggregator<->helper")
DEALER0 = ShareMacKey.generate(recipient="dealer-aggregator")
DEALER1 = ShareMacKey.generate(recipient="dealer-helper")
SPECS = [RangeSpec.for_codec(CODEC), RangeSpec.for_codec(CODEC, layout="ripple")]
P_REJECT = 1e-9

# -bound-1ulp, -bound, 0, bound, bound+1ulp, huge, 2^63, wraparound
BOUNDARY = {
    -BOUND - 1: False,
    -BOUND: True,
    -BOUND + 1: True,
    -1: True,
    0: True,
    1: True,
    BOUND - 1: True,
    BOUND: True,
    BOUND + 1: False,
    2 * BOUND: False,
    2 * BOUND + 1: False,
    -2 * BOUND - 1: False,
    1000 << 12: False,
    -(1000 << 12): False,
    (1 << 62): False,
    (1 << 63) - 1: False,
    1 << 63: False,  # -2^63 as a signed ring value
    (1 << 63) + BOUND: False,
    (1 << 63) - BOUND: False,
    RING - BOUND - 1: False,  # wraps to -bound - 1
    RING - BOUND: True,  # wraps to -bound
    RING - 1: True,  # wraps to -1
}


def ring(values: list[int]) -> np.ndarray:
    return np.array([v % RING for v in values], dtype=np.uint64)


def in_range(values: np.ndarray, spec: RangeSpec) -> bool:
    signed = values.view(np.int64).astype(object)
    return all(spec.lower <= int(v) <= spec.upper for v in signed)


def run(values: np.ndarray, spec: RangeSpec = SPECS[0]) -> bool:
    return range_check(split(values), label=LABEL, channel_key=CHANNEL, spec=spec)


def transcript(values: np.ndarray, spec: RangeSpec = SPECS[0]) -> tuple[list[bytes], list[bytes]]:
    """Run both parties; return the messages each one sent, in order."""
    m0, m1 = deal_range_check(values.size, label=LABEL, spec=spec)
    p0 = RangeCheckParty(material=m0, channel_key=CHANNEL)
    p1 = RangeCheckParty(material=m1, channel_key=CHANNEL)
    s0, s1 = split(values)
    sent0, sent1 = [p0.start(s0)], [p1.start(s1)]
    while True:
        n0, n1 = p0.advance(sent1[-1]), p1.advance(sent0[-1])
        if n0 is None or n1 is None:
            assert n0 is None and n1 is None and p0.valid == p1.valid
            return sent0, sent1
        sent0.append(n0)
        sent1.append(n1)


# -- exactness ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.layout)
@pytest.mark.parametrize("value", sorted(BOUNDARY))
def test_boundary_values_exactly(spec: RangeSpec, value: int) -> None:
    """One value at the boundary among honest ones, in the first, a middle and the last lane."""
    for position in (0, 64, 129):
        values = CODEC.encode(np.linspace(-8, 8, 130))
        values[position] = np.uint64(value % RING)
        assert run(values, spec) is BOUNDARY[value], (value, position)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.layout)
def test_honest_uploads_pass_and_one_bad_cell_fails(spec: RangeSpec) -> None:
    """10,000 x 10 honest clipped predictions pass; one cell at 1000 fails the whole upload."""
    rng = np.random.default_rng(7)
    preds = np.clip(rng.normal(0.0, 4.0, size=(10_000, 10)), -8.0, 8.0)
    preds[0, 0], preds[-1, -1] = 8.0, -8.0
    values = CODEC.encode(preds).reshape(-1)
    assert run(values, spec)
    values[54_321] = np.uint64(1000 << 12)
    assert not run(values, spec)


@pytest.mark.parametrize("count", [1, 63, 64, 65, 127, 128, 1000])
def test_padding_lanes_never_decide(count: int) -> None:
    """Counts that do not fill the last word: padding is valid, real lanes still decide."""
    values = CODEC.encode(np.full(count, -8.0))
    assert run(values)
    values[-1] = np.uint64((BOUND + 1) % RING)
    assert not run(values)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=70),
    st.sampled_from(SPECS),
)
def test_random_ring_values(values: list[int], spec: RangeSpec) -> None:
    array = ring(values)
    assert run(array, spec) is in_range(array, spec)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(-70, 70), min_size=1, max_size=40),
    st.integers(-60, 0),
    st.integers(0, 60),
    st.sampled_from(["prefix", "ripple"]),
)
def test_any_public_interval(values: list[int], lower: int, upper: int, layout: str) -> None:
    """The circuit is not tied to the codec: any [lower, upper] is decided exactly."""
    spec = RangeSpec(lower=lower, upper=upper, layout=layout)
    array = ring(values)
    assert run(array, spec) is in_range(array, spec)


def test_wide_interval_near_the_ring_limits() -> None:
    spec = RangeSpec(lower=-(1 << 62) + 1, upper=(1 << 62) - 1)
    assert run(ring([-(1 << 62) + 1, (1 << 62) - 1, 0]), spec)
    assert not run(ring([1 << 62]), spec)
    assert not run(ring([-(1 << 62)]), spec)


# -- a malicious participant ----------------------------------------------------------


def test_crafted_shares_reconstructing_to_1000_are_rejected() -> None:
    """A participant skips its encoder's clip: its two shares reconstruct to 1000 in one cell."""
    label = ShareLabel(round_id=0, participant_id="mallory", tensor="pred-1")
    honest = CODEC.encode(np.zeros((100, 10))).reshape(-1)
    share0, seed = split_with_seed(honest, label=label)
    share0 = share0.copy()
    share0[17] += np.uint64(1000 << 12)  # what the malicious encoder sends the aggregator
    share1 = ShareBundle.from_seed(seed, label=label, count=honest.size, frac_bits=12).values()
    assert CODEC.decode(reconstruct(share0, share1))[17] == 1000.0
    assert not range_check((share0, share1), label=LABEL, channel_key=CHANNEL)
    with pytest.raises(SharesOutOfRange) as caught:
        require_in_range((share0, share1), label=LABEL, channel_key=CHANNEL)
    assert caught.value.code == "CRYPTO_SHARES_OUT_OF_RANGE"
    assert "4096000" not in str(caught.value) and "1000" not in str(caught.value)


# -- protocol: material, messages, state machine --------------------------------------


def test_cost_is_what_the_parties_send() -> None:
    for spec in SPECS:
        values = CODEC.encode(np.zeros(1000))
        sent0, sent1 = transcript(values, spec)
        cost = range_cost(values.size, spec=spec, label=LABEL)
        assert cost.rounds == len(sent0) == len(sent1)
        assert cost.exchange_bytes == sum(map(len, sent0)) == sum(map(len, sent1))
        m0, m1 = deal_range_check(values.size, label=LABEL, spec=spec)
        dealt = (len(m0.to_bytes(DEALER0)), len(m1.to_bytes(DEALER1)))
        assert cost.dealer_bytes == dealt
    prefix = range_cost(100_000, spec=SPECS[0], label=LABEL)
    ripple = range_cost(100_000, spec=SPECS[1], label=LABEL)
    assert prefix.rounds == 25 and ripple.rounds == 82
    assert prefix.and_gates == 64 * (250 * 1563 + 1562 + 6)


def test_material_round_trips_and_refuses_tampering() -> None:
    m0, m1 = deal_range_check(100, label=LABEL)
    blob0, blob1 = m0.to_bytes(DEALER0), m1.to_bytes(DEALER1)
    p0 = RangeMaterial.parse(blob0, key=DEALER0, label=LABEL, party=0, count=100)
    p1 = RangeMaterial.parse(blob1, key=DEALER1, label=LABEL, party=1, count=100)
    r0, bits0, a0, b0, c0 = p0.parts()
    r1, bits1, a1, b1, c1 = p1.parts()
    assert np.array_equal(unbitslice(bits0 ^ bits1, 100), r0 + r1)  # an edaBit
    assert np.array_equal((a0 ^ a1) & (b0 ^ b1), c0 ^ c1)  # AND triples
    flipped = bytearray(blob1)
    flipped[200] ^= 1
    cases = [
        (bytes(flipped), DEALER1, 1, 100, SPECS[0]),
        (blob1, DEALER0, 1, 100, SPECS[0]),  # wrong recipient key
        (blob1, DEALER1, 1, 101, SPECS[0]),  # another count
        (blob1, DEALER1, 1, 100, SPECS[1]),  # dealt for another layout
        (blob0, DEALER0, 1, 100, SPECS[0]),  # party 0's seed passed off as party 1's
    ]
    for blob, key, party, count, spec in cases:
        with pytest.raises(ShareTampered):
            RangeMaterial.parse(blob, key=key, label=LABEL, party=party, count=count, spec=spec)
    assert "seed" not in repr(p1) and str(c1[0]) not in repr(p1)


def test_messages_are_bound_to_sender_step_and_check() -> None:
    values = CODEC.encode(np.zeros(70))
    m0, m1 = deal_range_check(values.size, label=LABEL)
    p0 = RangeCheckParty(material=m0, channel_key=CHANNEL)
    p1 = RangeCheckParty(material=m1, channel_key=CHANNEL)
    s0, s1 = split(values)
    first0, first1 = p0.start(s0), p1.start(s1)
    with pytest.raises(ShareTampered, match="party"):
        p0.advance(first0)  # reflected back to its sender
    altered = bytearray(first1)
    altered[-40] ^= 0x80
    with pytest.raises(ShareTampered, match="tag"):
        p0.advance(bytes(altered))
    second0 = p0.advance(first1)
    assert second0 is not None
    with pytest.raises(ShareTampered, match="label|count"):
        p0.advance(first1)  # step 0 replayed as step 1


def test_state_machine_refuses_out_of_order_and_reuse() -> None:
    m0, _ = deal_range_check(10, label=LABEL)
    party = RangeCheckParty(material=m0, channel_key=CHANNEL)
    with pytest.raises(ParameterInvalid, match="advance"):
        party.advance(b"")
    with pytest.raises(ParameterInvalid, match="verdict"):
        _ = party.valid
    with pytest.raises(ParameterInvalid, match="values"):
        party.start(np.zeros(11, dtype=np.uint64))
    party.start(np.zeros(10, dtype=np.uint64))
    with pytest.raises(ParameterInvalid, match="single-use"):
        party.start(np.zeros(10, dtype=np.uint64))
    with pytest.raises(ParameterInvalid, match="RangeMaterial"):
        RangeCheckParty(material=b"x", channel_key=CHANNEL)  # type: ignore[arg-type]


def test_spec_validation() -> None:
    with pytest.raises(ParameterInvalid, match="exceeds"):
        RangeSpec(lower=1, upper=0)
    with pytest.raises(ParameterInvalid, match="upper"):
        RangeSpec(lower=0, upper=1 << 62)
    with pytest.raises(ParameterInvalid, match="layout"):
        RangeSpec(lower=0, upper=1, layout="kogge")
    with pytest.raises(ParameterInvalid, match="tensor"):
        deal_range_check(1, label=ShareLabel(round_id=0, participant_id="r", tensor="t" * 121))


def test_bitslice_round_trip() -> None:
    values = np.frombuffer(np.random.default_rng(1).bytes(8 * 1000), dtype="<u8").astype(np.uint64)
    words = bitslice(values)
    assert words.shape == (64, 16)
    assert int(words[5, 1] >> np.uint64(3)) & 1 == int(values[67] >> np.uint64(5)) & 1
    assert np.array_equal(unbitslice(words, 1000), values)
    flags = values % np.uint64(3) == 0
    assert np.array_equal(unpack_lanes(pack_lanes(flags), 1000), flags)


# -- what a server sees -------------------------------------------------------------------


def view_words(messages: list[bytes]) -> np.ndarray:
    """Payload words of a party's messages, the final one-bit output share left out."""
    overhead = 4 + 1 + 1 + 1 + 1 + 8 + 2 + 32
    out = []
    for i, blob in enumerate(messages[:-1]):
        label = len(LABEL.to_bytes()) + len(f"/{i}")
        out.append(np.frombuffer(blob[overhead - 32 + label : -32], dtype="<u8"))
    return np.concatenate(out).astype(np.uint64)


def worst_bit_pvalue(words: np.ndarray) -> float:
    bits = np.unpackbits(words.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1)
    ones = bits.sum(axis=0).astype(np.float64)
    z = np.abs(ones - bits.shape[0] / 2) / np.sqrt(bits.shape[0] / 4)
    return float(min(1.0, 64 * 2 * stats.norm.sf(z.max())))


def byte_chi2_pvalue(words: np.ndarray) -> float:
    counts = np.bincount(words.astype("<u8").view(np.uint8), minlength=256)
    return float(stats.chisquare(counts).pvalue)


@pytest.mark.parametrize("who", [0, 1])
def test_one_party_view_is_uniform_and_independent_of_the_values(who: int) -> None:
    """What party ``who`` receives is uniform for all-zero, all-at-bound and huge values."""
    cases = {
        "zero": np.zeros(4096, dtype=np.uint64),
        "bound": CODEC.encode(np.full(4096, 8.0)),
        "huge": ring([1000 << 12] * 4096),
    }
    views = {}
    for name, values in cases.items():
        sent = transcript(values)[1 - who]  # what the other party sent to ``who``
        views[name] = view_words(sent)
        assert worst_bit_pvalue(views[name]) > P_REJECT, name
        assert byte_chi2_pvalue(views[name]) > P_REJECT, name
    table = np.stack(
        [np.bincount(v.astype("<u8").view(np.uint8), minlength=256) for v in views.values()]
    )
    assert stats.chi2_contingency(table).pvalue > P_REJECT  # same distribution for each input


def test_view_statistics_reject_unmasked_values() -> None:
    """The same statistics reject views that carry the values (no mask ``r``)."""
    spread = CODEC.encode(np.random.default_rng(3).uniform(-8, 8, 50_000))
    assert byte_chi2_pvalue(spread) < P_REJECT
    zero, bound = np.zeros(4096, dtype=np.uint64), CODEC.encode(np.full(4096, 8.0))
    for constant in (zero, bound):
        assert worst_bit_pvalue(constant) < P_REJECT
    short = np.frombuffer(np.random.default_rng(4).bytes(8 * 4096), dtype="<u8") >> np.uint64(16)
    leaky = [short + (v << np.uint64(48)) for v in (zero, bound)]  # a mask 16 bits short
    table = np.stack([np.bincount(v.astype("<u8").view(np.uint8), minlength=256) for v in leaky])
    assert stats.chi2_contingency(table).pvalue < P_REJECT


def test_a_cheating_server_decides_the_verdict() -> None:
    """Documented limit: correctness needs both servers honest; one flips its output share."""
    values = ring([1000 << 12])
    m0, m1 = deal_range_check(1, label=LABEL)
    p0 = RangeCheckParty(material=m0, channel_key=CHANNEL)
    p1 = RangeCheckParty(material=m1, channel_key=CHANNEL)
    s0, s1 = split(values)
    out0, out1 = p0.start(s0), p1.start(s1)
    while p0.stage != "output":
        out0, out1 = p0.advance(out1), p1.advance(out0)  # type: ignore[assignment]
    frame = bytearray(out1[:-32])
    frame[-8] ^= 1  # the helper flips its share of the verdict bit and re-tags
    forged = bytes(frame) + CHANNEL.tag(bytes(frame))
    assert p0.advance(forged) is None and p0.valid  # an invalid upload passes
