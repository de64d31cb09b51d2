import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from crypto.errors import ParameterInvalid, ShareTampered
from crypto.shares import (
    RING_PREDICTIONS,
    ShareBundle,
    ShareLabel,
    expand_seed,
    reconstruct,
    split,
    split_with_seed,
)

CODEC = RING_PREDICTIONS
LABEL = ShareLabel(round_id=3, participant_id="bank-1", tensor="predictions")
values_in_range = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=1, max_dims=2, max_side=12),
    elements=st.floats(min_value=-8.0, max_value=8.0, allow_nan=False),
)
ring_arrays = hnp.arrays(
    np.uint64,
    hnp.array_shapes(min_dims=1, max_dims=3, max_side=6),
    elements=st.integers(0, 2**64 - 1),
)


@settings(max_examples=60, deadline=None)
@given(values_in_range)
def test_split_reconstruct_exact(values: np.ndarray) -> None:
    encoded = CODEC.encode(values)
    share0, share1 = split(encoded)
    assert share0.shape == share1.shape == encoded.shape
    assert np.array_equal(reconstruct(share0, share1), encoded)
    assert np.max(np.abs(CODEC.decode(reconstruct(share0, share1)) - values)) <= 2.0**-13


@settings(max_examples=40, deadline=None)
@given(ring_arrays)
def test_any_ring_element_reconstructs(encoded: np.ndarray) -> None:
    share0, share1 = split(encoded)
    assert np.array_equal(reconstruct(share0, share1), encoded)


@settings(max_examples=40, deadline=None)
@given(values_in_range, st.integers(0, 2**63 - 1))
def test_seeded_split_reconstructs(values: np.ndarray, round_id: int) -> None:
    label = ShareLabel(round_id=round_id, participant_id="p", tensor="t")
    encoded = CODEC.encode(values)
    share0, seed = split_with_seed(encoded, label=label)
    assert len(seed) == 32
    mask = expand_seed(seed, label, encoded.size).reshape(encoded.shape)
    assert np.array_equal(reconstruct(share0, mask), encoded)
    b0 = ShareBundle.from_values(share0, label=label, party=0, frac_bits=12)
    b1 = ShareBundle.from_seed(seed, label=label, count=encoded.size, frac_bits=12)
    assert b1.seeded and not b0.seeded
    assert np.array_equal(reconstruct(b0, b1), encoded.reshape(-1))
    assert np.array_equal(reconstruct(b1, b0), encoded.reshape(-1))


def test_seeded_split_uses_fresh_seed_each_time() -> None:
    encoded = CODEC.encode(np.zeros(16))
    (s_a, seed_a), (s_b, seed_b) = (split_with_seed(encoded, label=LABEL) for _ in range(2))
    assert seed_a != seed_b and not np.array_equal(s_a, s_b)


def test_repr_hides_values_and_seed() -> None:
    encoded = CODEC.encode(np.full(4, 1.5))
    share0, seed = split_with_seed(encoded, label=LABEL)
    text = repr(ShareBundle.from_values(share0, label=LABEL, party=0, frac_bits=12))
    text += repr(ShareBundle.from_seed(seed, label=LABEL, count=4, frac_bits=12))
    assert str(int(share0[0])) not in text and seed.hex() not in text and "values" not in text


def _bundles(label: ShareLabel = LABEL) -> tuple[ShareBundle, ShareBundle]:
    share0, seed = split_with_seed(CODEC.encode(np.ones(5)), label=label)
    return (
        ShareBundle.from_values(share0, label=label, party=0, frac_bits=12),
        ShareBundle.from_seed(seed, label=label, count=5, frac_bits=12),
    )


def test_reconstruct_refuses_mixed_labels() -> None:
    b0, _ = _bundles()
    _, other1 = _bundles(ShareLabel(round_id=4, participant_id="bank-1", tensor="predictions"))
    with pytest.raises(ShareTampered, match="different labels"):
        reconstruct(b0, other1)


def test_reconstruct_refuses_same_party_twice() -> None:
    b0, _ = _bundles()
    with pytest.raises(ShareTampered, match="parties 0 and 0"):
        reconstruct(b0, b0)


def test_reconstruct_refuses_length_and_bits_mismatch() -> None:
    b0, b1 = _bundles()
    shorter = ShareBundle.from_values(b0.values()[:4], label=LABEL, party=0, frac_bits=12)
    with pytest.raises(ShareTampered, match="lengths differ"):
        reconstruct(shorter, b1)
    other_bits = ShareBundle.from_values(b0.values(), label=LABEL, party=0, frac_bits=24)
    with pytest.raises(ShareTampered, match="fractional bits"):
        reconstruct(other_bits, b1)


def test_reconstruct_argument_errors() -> None:
    b0, _ = _bundles()
    with pytest.raises(ParameterInvalid, match="not a mix"):
        reconstruct(b0, np.zeros(5, dtype=np.uint64))
    with pytest.raises(ParameterInvalid, match="shapes differ"):
        reconstruct(np.zeros(5, dtype=np.uint64), np.zeros(4, dtype=np.uint64))
    with pytest.raises(ParameterInvalid, match="uint64"):
        split(np.zeros(3, dtype=np.float64))


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: ShareBundle.from_seed(b"short", label=LABEL, count=1, frac_bits=0), "32 bytes"),
        (lambda: ShareBundle.from_seed(bytes(32), label=LABEL, count=-1, frac_bits=0), "count"),
        (
            lambda: ShareBundle.from_values(
                np.zeros(1, np.uint64), label=LABEL, party=2, frac_bits=0
            ),
            "party",
        ),
        (
            lambda: ShareBundle.from_values(
                np.zeros(1, np.uint64), label=LABEL, party=0, frac_bits=63
            ),
            "frac_bits",
        ),
    ],
)
def test_bundle_validation(call: object, fragment: str) -> None:
    with pytest.raises(ParameterInvalid, match=fragment):
        call()  # type: ignore[operator]


def test_bundle_values_are_a_read_only_copy() -> None:
    source = CODEC.encode(np.ones(3))
    bundle = ShareBundle.from_values(source, label=LABEL, party=0, frac_bits=12)
    source[0] = 0
    assert bundle.values()[0] == CODEC.encode([1.0])[0]
    with pytest.raises(ValueError, match="read-only"):
        bundle.values()[0] = 1
