import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.errors import ParameterInvalid, ShareTampered
from crypto.shares import (
    RING_PREDICTIONS,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
    reconstruct,
    split_with_seed,
    wire,
    wire_bytes_per_value,
)

LABEL = ShareLabel(round_id=9, participant_id="hospital-7", tensor="predictions")
SECRET_AGG = bytes(range(32))
SECRET_HELP = bytes(range(100, 132))
KEY0 = ShareMacKey.derive(SECRET_AGG, recipient="aggregator")
KEY1 = ShareMacKey.derive(SECRET_HELP, recipient="helper")
VALUES = RING_PREDICTIONS.encode(np.linspace(-8, 8, 50))


def _upload() -> tuple[bytes, bytes]:
    share0, seed = split_with_seed(VALUES, label=LABEL)
    b0 = ShareBundle.from_values(share0, label=LABEL, party=0, frac_bits=12)
    b1 = ShareBundle.from_seed(seed, label=LABEL, count=VALUES.size, frac_bits=12)
    return b0.to_bytes(KEY0), b1.to_bytes(KEY1)


BLOB0, BLOB1 = _upload()


def _parse0(blob: bytes, **kw: object) -> ShareBundle:
    args: dict[str, object] = {"key": KEY0, "label": LABEL, "party": 0}
    args.update(kw)
    return ShareBundle.parse(blob, **args)  # type: ignore[arg-type]


def _parse1(blob: bytes) -> ShareBundle:
    return ShareBundle.parse(blob, key=KEY1, label=LABEL, party=1, seeded=True)


def test_roundtrip_through_bytes_reconstructs() -> None:
    # The receiving ends re-derive their keys from the shared secrets.
    b0 = ShareBundle.parse(
        BLOB0, key=ShareMacKey.derive(SECRET_AGG, recipient="aggregator"), label=LABEL, party=0
    )
    b1 = _parse1(BLOB1)
    assert np.array_equal(reconstruct(b0, b1), VALUES)
    assert len(BLOB1) == wire.frame_overhead(LABEL) + 32
    assert len(BLOB0) == wire.frame_overhead(LABEL) + 8 * VALUES.size


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_bit_flip_is_detected(data: st.DataObject) -> None:
    blob = data.draw(st.sampled_from([BLOB0, BLOB1]))
    pos = data.draw(st.integers(0, len(blob) - 1))
    mask = data.draw(st.integers(1, 255))
    tampered = bytearray(blob)
    tampered[pos] ^= mask
    with pytest.raises(ShareTampered):
        if blob is BLOB0:
            _parse0(bytes(tampered))
        else:
            _parse1(bytes(tampered))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, len(BLOB1) - 1))
def test_truncated_blobs_are_detected(cut: int) -> None:
    with pytest.raises(ShareTampered):
        _parse1(BLOB1[:cut])
    with pytest.raises(ShareTampered):
        _parse0(BLOB0[:cut])


def test_wrong_length_message() -> None:
    with pytest.raises(ShareTampered, match="length"):
        _parse0(BLOB0 + b"\x00")
    with pytest.raises(ShareTampered, match="shorter than header"):
        _parse0(b"SFS1")


def test_wrong_ring_id_is_a_typed_error_even_with_a_valid_tag() -> None:
    body = bytearray(BLOB0[: -wire.TAG_BYTES])
    body[5] = 32  # ring id byte
    forged = bytes(body) + KEY0.tag(bytes(body))
    with pytest.raises(ShareTampered, match="ring id 32"):
        _parse0(forged)


def test_wrong_magic_and_unknown_kind() -> None:
    with pytest.raises(ShareTampered, match="magic"):
        _parse0(b"XXXX" + BLOB0[4:])
    with pytest.raises(ShareTampered, match="kind 9"):
        _parse0(BLOB0[:4] + b"\x09" + BLOB0[5:])


def test_swapped_shares_are_detected() -> None:
    # The seed blob delivered to the aggregator: wrong key (and wrong kind).
    with pytest.raises(ShareTampered, match="tag"):
        _parse0(BLOB1)
    # Right key but the receiver expected the other kind or party.
    with pytest.raises(ShareTampered, match="kind"):
        ShareBundle.parse(BLOB1, key=KEY1, label=LABEL, party=1, seeded=False)
    with pytest.raises(ShareTampered, match="party"):
        ShareBundle.parse(BLOB1, key=KEY1, label=LABEL, party=0, seeded=True)


def test_replayed_in_another_round_or_for_another_participant() -> None:
    for other in (
        ShareLabel(round_id=10, participant_id="hospital-7", tensor="predictions"),
        ShareLabel(round_id=9, participant_id="hospital-8", tensor="predictions"),
    ):
        with pytest.raises(ShareTampered, match="label"):
            _parse0(BLOB0, label=other)


def test_count_limit_checked_before_allocation() -> None:
    with pytest.raises(ShareTampered, match="exceeds limit"):
        _parse0(BLOB0, max_count=VALUES.size - 1)
    head = struct.Struct(">4sBBBBQH")
    fields = list(head.unpack_from(BLOB0))
    fields[5] = 2**60  # huge claimed count
    with pytest.raises(ShareTampered, match="exceeds limit"):
        _parse0(head.pack(*fields) + BLOB0[head.size :])


def test_out_of_range_frac_bits_with_valid_tag() -> None:
    body = bytearray(BLOB0[: -wire.TAG_BYTES])
    body[7] = 99
    with pytest.raises(ShareTampered, match="frac_bits"):
        _parse0(bytes(body) + KEY0.tag(bytes(body)))


def test_not_bytes() -> None:
    with pytest.raises(ShareTampered, match="must be bytes"):
        _parse0("text")  # type: ignore[arg-type]


def test_key_handle_hygiene() -> None:
    assert "hidden" in repr(KEY0) and SECRET_AGG.hex() not in repr(KEY0)
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(KEY0)
    assert KEY0.recipient == "aggregator"
    # Keys for two recipients from one secret are independent.
    other = ShareMacKey.derive(SECRET_AGG, recipient="helper")
    assert other.tag(b"m") != KEY0.tag(b"m")
    assert ShareMacKey.generate(recipient="x").tag(b"m") != KEY0.tag(b"m")
    with pytest.raises(ParameterInvalid, match="at least 32 bytes"):
        ShareMacKey.derive(b"short", recipient="helper")
    with pytest.raises(ParameterInvalid, match="recipient"):
        ShareMacKey.derive(SECRET_AGG, recipient="")


def test_wire_bytes_per_value_meets_target() -> None:
    sizes = wire_bytes_per_value(10_000 * 10)
    assert sizes.per_value <= 9.0
    assert sizes.total == sizes.to_party0 + sizes.to_party1
    unseeded = wire_bytes_per_value(100_000, seeded=False)
    assert unseeded.per_value > 16.0 and sizes.per_value < 8.01
    exact = wire_bytes_per_value(VALUES.size, label=LABEL)
    assert (exact.to_party0, exact.to_party1) == (len(BLOB0), len(BLOB1))
    with pytest.raises(ParameterInvalid, match="count"):
        wire_bytes_per_value(0)


def test_expected_count_is_enforced() -> None:
    assert _parse1(BLOB1).count == VALUES.size
    ShareBundle.parse(BLOB1, key=KEY1, label=LABEL, party=1, seeded=True, count=VALUES.size)
    with pytest.raises(ShareTampered, match="expected count 49"):
        ShareBundle.parse(BLOB1, key=KEY1, label=LABEL, party=1, seeded=True, count=49)
    with pytest.raises(ShareTampered, match="expected count"):
        _parse0(BLOB0, count=VALUES.size + 1)
