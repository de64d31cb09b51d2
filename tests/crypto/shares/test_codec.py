import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.errors import EncodingOverflow, ParameterInvalid
from crypto.shares import RING_PREDICTIONS, RING_WEIGHTS, FixedPointCodec

CODEC = RING_PREDICTIONS
finite_in_range = st.floats(min_value=-8.0, max_value=8.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(finite_in_range, min_size=1, max_size=40))
def test_encode_decode_error_at_most_half_ulp(values: list[float]) -> None:
    decoded = CODEC.decode(CODEC.encode(values))
    assert np.max(np.abs(decoded - np.asarray(values))) <= 2.0 ** -(CODEC.frac_bits + 1)


def test_encode_is_twos_complement() -> None:
    enc = CODEC.encode([-1.0, 0.0, 1.0, -8.0, 8.0])
    assert enc.dtype == np.uint64
    assert int(enc[0]) == 2**64 - 4096
    assert int(enc[1]) == 0 and int(enc[2]) == 4096
    assert int(enc[3]) == 2**64 - 8 * 4096 and int(enc[4]) == 8 * 4096


@pytest.mark.parametrize("bad", [8.0001, -8.5, float("inf"), float("nan"), 1e300])
def test_encode_outside_clip_bound_raises(bad: float) -> None:
    with pytest.raises(EncodingOverflow, match="outside the clip bound"):
        CODEC.encode([0.0, bad])


def test_overflow_message_gives_count_not_values() -> None:
    with pytest.raises(EncodingOverflow) as info:
        CODEC.encode([123.456, -777.0, 1.0])
    assert "2 of 3" in str(info.value) and "123" not in str(info.value)
    assert str(info.value).startswith("[CRYPTO_ENCODING_OVERFLOW]")


def test_encode_clipped_clips_only_when_asked() -> None:
    decoded = CODEC.decode(CODEC.encode_clipped([100.0, -1e9, 3.5, float("inf")]))
    assert decoded.tolist() == [8.0, -8.0, 3.5, 8.0]
    with pytest.raises(EncodingOverflow, match="NaN"):
        CODEC.encode_clipped([float("nan")])


def test_decode_with_product_bits() -> None:
    product = CODEC.encode([2.0]) * CODEC.encode([-3.0])
    assert CODEC.decode(product, frac_bits=2 * CODEC.frac_bits).tolist() == [-6.0]
    with pytest.raises(ParameterInvalid, match="frac_bits"):
        CODEC.decode(product, frac_bits=63)
    with pytest.raises(ParameterInvalid, match="uint64"):
        CODEC.decode(np.zeros(3, dtype=np.int64))


def test_presets_satisfy_documented_sum_bound() -> None:
    for codec in (RING_PREDICTIONS, RING_WEIGHTS):
        assert codec.max_participants * codec.clip_bound * 2**codec.frac_bits < 2**63
        assert codec.bound_int == codec.clip_bound * 2**codec.frac_bits
    assert (RING_PREDICTIONS.clip_bound, RING_PREDICTIONS.frac_bits) == (8.0, 12)
    assert RING_PREDICTIONS.max_participants == 1024


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"frac_bits": 41}, "frac_bits"),
        ({"frac_bits": -1}, "frac_bits"),
        ({"clip_bound": 0.0}, "clip_bound"),
        ({"clip_bound": math.inf}, "clip_bound"),
        ({"max_participants": 0}, "max_participants"),
        ({"name": ""}, "name"),
        ({"frac_bits": 40, "clip_bound": 2.0**20, "max_participants": 8}, "wrap the ring"),
    ],
)
def test_constructor_validates(kwargs: dict[str, object], fragment: str) -> None:
    base: dict[str, object] = {
        "name": "t",
        "clip_bound": 1.0,
        "frac_bits": 8,
        "max_participants": 4,
    }
    base.update(kwargs)
    with pytest.raises(ParameterInvalid, match=fragment):
        FixedPointCodec(**base)  # type: ignore[arg-type]


def test_constructor_boundary_exactly_at_two_to_63() -> None:
    # K * B * 2^f = 2^3 * 2^20 * 2^40 = 2^63 must be refused; one participant fewer is fine.
    with pytest.raises(ParameterInvalid, match="2\\^63"):
        FixedPointCodec(name="edge", clip_bound=2.0**20, frac_bits=40, max_participants=8)
    ok = FixedPointCodec(name="edge", clip_bound=2.0**20, frac_bits=40, max_participants=7)
    assert ok.max_participants * ok.bound_int == 7 * 2**60


def test_check_participants() -> None:
    CODEC.check_participants(1024)
    with pytest.raises(EncodingOverflow, match="K_max=1024"):
        CODEC.check_participants(1025)
    with pytest.raises(ParameterInvalid, match="count"):
        CODEC.check_participants(0)
