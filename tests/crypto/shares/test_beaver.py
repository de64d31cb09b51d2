import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from crypto.errors import ParameterInvalid, ShareTampered
from crypto.shares import (
    RING_PREDICTIONS,
    BeaverParty,
    ShareLabel,
    ShareMacKey,
    TripleShare,
    deal_triples,
    reconstruct,
    secure_multiply,
    split,
)
from crypto.shares._ring import signed
from crypto.shares.beaver import STAGE_DONE, STAGE_OPENED, STAGE_READY

CODEC = RING_PREDICTIONS
LABEL = ShareLabel(round_id=2, participant_id="hospital-3", tensor="score-square")
CHANNEL = ShareMacKey.derive(bytes(range(40)), recipient="aggregator<->helper")
DEALER0 = ShareMacKey.generate(recipient="aggregator")
DEALER1 = ShareMacKey.generate(recipient="helper")
floats = hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(-8, 8))


@settings(max_examples=40, deadline=None)
@given(floats, st.data(), st.booleans())
def test_beaver_product_is_exact_in_the_ring(
    x_real: np.ndarray, data: st.DataObject, seeded: bool
) -> None:
    y_real = data.draw(hnp.arrays(np.float64, x_real.shape, elements=st.floats(-8, 8)))
    x, y = CODEC.encode(x_real), CODEC.encode(y_real)
    triples = deal_triples(x.size, label=LABEL, seeded=seeded)
    z = reconstruct(*secure_multiply(split(x), split(y), triples, channel_key=CHANNEL))
    expected = [a * b for a, b in zip(signed(x).tolist(), signed(y).tolist(), strict=True)]
    assert signed(z).tolist() == expected  # 2f fractional bits, no error at all


@settings(max_examples=40, deadline=None)
@given(floats)
def test_beaver_with_truncation_within_one_ulp(x_real: np.ndarray) -> None:
    x = CODEC.encode(x_real)
    y = CODEC.encode(-x_real / 2)
    triples = deal_triples(x.size, label=LABEL)
    z0, z1 = secure_multiply(
        split(x), split(y), triples, channel_key=CHANNEL, truncate_bits=CODEC.frac_bits
    )
    exact = (signed(x).astype(object) * signed(y).astype(object)) >> CODEC.frac_bits
    diff = signed(reconstruct(z0, z1)).astype(object) - exact
    assert set(diff.tolist()) <= {0, 1}  # one unit of 2^-12, failure prob. <= 2^-33 each


def test_triples_satisfy_c_equals_ab_and_serialize() -> None:
    for seeded in (False, True):
        p0, p1 = deal_triples(100, label=LABEL, seeded=seeded)
        blob0, blob1 = p0.to_bytes(DEALER0), p1.to_bytes(DEALER1)
        if seeded:
            assert len(blob0) < 200 < 2400 < len(blob1)
        q0 = TripleShare.parse(blob0, key=DEALER0, label=LABEL, party=0, seeded=seeded)
        q1 = TripleShare.parse(blob1, key=DEALER1, label=LABEL, party=1)
        a, b, c = (reconstruct(u, v) for u, v in zip(q0.parts(), q1.parts(), strict=True))
        assert np.array_equal(c, a * b)
        assert "_abc" not in repr(q0) and "seed" not in repr(q0)


def test_tampered_triple_blob_is_refused() -> None:
    p0, _ = deal_triples(10, label=LABEL)
    blob = bytearray(p0.to_bytes(DEALER0))
    blob[60] ^= 1
    with pytest.raises(ShareTampered, match="tag"):
        TripleShare.parse(bytes(blob), key=DEALER0, label=LABEL, party=0)
    with pytest.raises(ShareTampered, match="kind"):
        TripleShare.parse(p0.to_bytes(DEALER0), key=DEALER0, label=LABEL, party=0, seeded=True)


def _parties(n: int = 8) -> tuple[BeaverParty, BeaverParty, tuple[np.ndarray, ...]]:
    t0, t1 = deal_triples(n, label=LABEL)
    x, y = CODEC.encode(np.full(n, 2.0)), CODEC.encode(np.full(n, 3.0))
    (x0, x1), (y0, y1) = split(x), split(y)
    return (
        BeaverParty(triples=t0, channel_key=CHANNEL),
        BeaverParty(triples=t1, channel_key=CHANNEL),
        (x0, x1, y0, y1),
    )


def test_state_machine_transitions() -> None:
    p0, p1, (x0, x1, y0, y1) = _parties()
    assert p0.stage == p1.stage == STAGE_READY
    with pytest.raises(ParameterInvalid, match="call open first"):
        p0.finish(b"")
    m0, m1 = p0.open(x0, y0), p1.open(x1, y1)
    assert p0.stage == STAGE_OPENED
    with pytest.raises(ParameterInvalid, match="single-use"):
        p0.open(x0, y0)
    z = reconstruct(p0.finish(m1), p1.finish(m0))
    assert p0.stage == p1.stage == STAGE_DONE
    assert CODEC.decode(z, frac_bits=24).tolist() == [6.0] * 8
    with pytest.raises(ParameterInvalid, match="stage 'done'"):
        p0.finish(m1)
    with pytest.raises(ParameterInvalid, match="single-use"):
        p0.open(x0, y0)


def test_openings_are_authenticated() -> None:
    p0, p1, (x0, x1, y0, y1) = _parties()
    m0, m1 = p0.open(x0, y0), p1.open(x1, y1)
    flipped = bytearray(m1)
    flipped[-40] ^= 0x80
    with pytest.raises(ShareTampered, match="tag"):
        p0.finish(bytes(flipped))
    with pytest.raises(ShareTampered, match="party 0, expected party 1"):
        p0.finish(m0)  # reflected message
    other_key = ShareMacKey.generate(recipient="aggregator<->helper")
    q0 = BeaverParty(triples=deal_triples(8, label=LABEL)[0], channel_key=other_key)
    q0.open(x0, y0)
    with pytest.raises(ShareTampered, match="tag"):
        q0.finish(m1)


def test_opening_for_another_multiplication_is_refused() -> None:
    p0, _, (x0, x1, y0, y1) = _parties()
    other = ShareLabel(round_id=2, participant_id="hospital-3", tensor="moments")
    _, t1 = deal_triples(8, label=other)
    q1 = BeaverParty(triples=t1, channel_key=CHANNEL)
    p0.open(x0, y0)
    with pytest.raises(ShareTampered, match="label"):
        p0.finish(q1.open(x1, y1))


def test_argument_errors() -> None:
    p0, _, (x0, _, y0, _) = _parties()
    with pytest.raises(ParameterInvalid, match="elements"):
        p0.open(x0[:4], y0[:4])
    with pytest.raises(ParameterInvalid, match="shapes differ"):
        p0.open(x0, y0[:4])
    with pytest.raises(ParameterInvalid, match="TripleShare"):
        BeaverParty(triples="nope", channel_key=CHANNEL)  # type: ignore[arg-type]
    with pytest.raises(ParameterInvalid, match="count"):
        deal_triples(0, label=LABEL)
    t0, t1 = deal_triples(8, label=LABEL)
    x, y = split(CODEC.encode(np.ones(8))), split(CODEC.encode(np.ones(8)))
    with pytest.raises(ParameterInvalid, match="party 0, party 1"):
        secure_multiply(x, y, (t1, t0), channel_key=CHANNEL)


def test_openings_reveal_only_masked_values() -> None:
    # d = x - a is uniform: the opened d of a zero secret is not zero, and two
    # multiplications of the same secret open different d.
    n = 4096
    x = CODEC.encode(np.zeros(n))
    ds = []
    for _ in range(2):
        t0, t1 = deal_triples(n, label=LABEL)
        p0 = BeaverParty(triples=t0, channel_key=CHANNEL)
        p1 = BeaverParty(triples=t1, channel_key=CHANNEL)
        (x0, x1), (y0, y1) = split(x), split(x)
        m0, m1 = p0.open(x0, y0), p1.open(x1, y1)
        body0 = np.frombuffer(m0[-32 - 16 * n : -32], dtype="<u8")
        body1 = np.frombuffer(m1[-32 - 16 * n : -32], dtype="<u8")
        ds.append((body0[:n] + body1[:n]).astype(np.uint64))
    assert np.count_nonzero(ds[0]) > n - 4 and not np.array_equal(ds[0], ds[1])


def test_triple_parse_checks_count_and_short_opening_is_refused() -> None:
    p0, _ = deal_triples(10, label=LABEL)
    with pytest.raises(ShareTampered, match="expected count 11"):
        TripleShare.parse(p0.to_bytes(DEALER0), key=DEALER0, label=LABEL, party=0, count=11)
    # A peer opening for fewer elements (valid tag) is refused.
    q0, _, (x0, _, y0, _) = _parties(8)
    t_small = deal_triples(4, label=LABEL)[1]
    short_peer = BeaverParty(triples=t_small, channel_key=CHANNEL)
    q0.open(x0, y0)
    with pytest.raises(ShareTampered, match="expected count 8"):
        q0.finish(short_peer.open(x0[:4], y0[:4]))
