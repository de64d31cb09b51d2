import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from crypto.errors import ParameterInvalid
from crypto.shares import RING_PREDICTIONS, encode_quadratic_form, reconstruct, split
from crypto.shares._ring import signed
from crypto.shares.bounds import truncation_failure_bound
from crypto.shares.linear import (
    add,
    add_public,
    matmul_public,
    mul_public,
    mul_public_fixed,
    sub,
    sub_public,
    sum_axis,
    truncate,
)

CODEC = RING_PREDICTIONS
pairs = st.integers(1, 8).flatmap(
    lambda c: st.tuples(
        *(hnp.arrays(np.float64, (5, c), elements=st.floats(-8, 8)) for _ in range(2))
    )
)


@settings(max_examples=50, deadline=None)
@given(pairs, st.integers(-(2**20), 2**20))
def test_linear_operations_commute_with_sharing(xy: tuple[np.ndarray, np.ndarray], k: int) -> None:
    x, y = CODEC.encode(xy[0]), CODEC.encode(xy[1])
    (x0, x1), (y0, y1) = split(x), split(y)
    assert np.array_equal(reconstruct(add(x0, y0), add(x1, y1)), x + y)
    assert np.array_equal(reconstruct(sub(x0, y0), sub(x1, y1)), x - y)
    assert np.array_equal(
        reconstruct(add_public(x0, y, party=0), add_public(x1, y, party=1)), x + y
    )
    assert np.array_equal(
        reconstruct(sub_public(x0, y, party=0), sub_public(x1, y, party=1)), x - y
    )
    kx = reconstruct(mul_public(x0, k), mul_public(x1, k))
    assert signed(kx).tolist() == [[k * v for v in row] for row in signed(x).tolist()]
    for axis in (0, 1, None):
        assert np.array_equal(
            reconstruct(sum_axis(x0, axis), sum_axis(x1, axis)), sum_axis(x, axis)
        )
    assert signed(sum_axis(x)).item() == sum(signed(x).reshape(-1).tolist())


@settings(max_examples=30, deadline=None)
@given(
    hnp.arrays(np.float64, (6, 4), elements=st.floats(-8, 8)),
    hnp.arrays(np.float64, (4, 4), elements=st.floats(-3, 3)),
)
def test_matmul_public_commutes_and_is_exact(x_real: np.ndarray, m_real: np.ndarray) -> None:
    x = CODEC.encode(x_real)
    m = encode_quadratic_form(CODEC, m_real, n_samples=6)
    x0, x1 = split(x)
    z = reconstruct(matmul_public(x0, m.values), matmul_public(x1, m.values))
    expected = [
        [sum(a * b for a, b in zip(row, mrow, strict=True)) for mrow in signed(m.values).tolist()]
        for row in signed(x).tolist()
    ]
    assert signed(z).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=64), st.integers(1, 24))
def test_truncation_within_one_ulp(values: list[int], bits: int) -> None:
    # |x| < 2^41: failure probability per element 2^-22 (truncation_failure_bound(41)).
    x = np.asarray(values, dtype=np.int64).astype(np.uint64)
    x0, x1 = split(x)
    t = signed(reconstruct(truncate(x0, bits, party=0), truncate(x1, bits, party=1)))
    floor = np.asarray(values, dtype=np.int64) >> bits
    assert set((t - floor).tolist()) <= {0, 1}


@pytest.mark.parametrize("sign", [1, -1])
def test_truncation_failure_rate_matches_theorem(sign: int) -> None:
    # |x| just below 2^56: SecureML bound 2^(56+1-64) = 2^-7 per element, about 2^-8
    # expected. Failures must occur (the bound is real) and stay under twice the bound.
    n, value_bits = 1 << 16, 56
    value = sign * ((1 << value_bits) - 1)
    x0, x1 = split(np.full(n, value, dtype=np.int64).astype(np.uint64))
    t = signed(reconstruct(truncate(x0, 12, party=0), truncate(x1, 12, party=1)))
    failures = int(np.count_nonzero(np.abs(t - (value >> 12)) > 1))
    assert 0 < failures <= 2 * n * truncation_failure_bound(value_bits)
    assert truncation_failure_bound(value_bits) == 2.0**-7
    with pytest.raises(ParameterInvalid, match="value_bits"):
        truncation_failure_bound(64)


def test_mul_public_fixed() -> None:
    x = CODEC.encode(np.linspace(-8, 8, 33))
    x0, x1 = split(x)
    y = reconstruct(
        mul_public_fixed(x0, 0.3, frac_bits=16, party=0),
        mul_public_fixed(x1, 0.3, frac_bits=16, party=1),
    )
    np.testing.assert_allclose(CODEC.decode(y), 0.3 * CODEC.decode(x), atol=2 * 2.0**-12)
    with pytest.raises(ParameterInvalid, match="does not fit"):
        mul_public_fixed(x0, float("inf"), frac_bits=16, party=0)
    with pytest.raises(ParameterInvalid, match="frac_bits"):
        mul_public_fixed(x0, 1.0, frac_bits=63, party=0)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: add(np.zeros(2, np.uint64), np.zeros(3, np.uint64)), "shapes differ"),
        (lambda: sub(np.zeros(2, np.float64), np.zeros(2, np.uint64)), "uint64"),
        (lambda: add_public(np.zeros(2, np.uint64), np.zeros(2, np.uint64), party=2), "party"),
        (lambda: truncate(np.zeros(2, np.uint64), 63, party=0), "bits"),
        (
            lambda: matmul_public(np.zeros((2, 3), np.uint64), np.zeros((3, 2), np.uint64)),
            "matmul_public",
        ),
        (lambda: mul_public(np.zeros(2, np.uint64), 2**64), "signed 64-bit"),
    ],
)
def test_argument_errors(call: object, fragment: str) -> None:
    with pytest.raises(ParameterInvalid, match=fragment):
        call()  # type: ignore[operator]


def test_mul_public_accepts_ring_scalars_and_refuses_floats() -> None:
    x0, x1 = split(CODEC.encode([1.0, -2.0]))
    minus_one = np.uint64(2**64 - 1)  # -1 in the ring, e.g. an encoded public value
    assert CODEC.decode(
        reconstruct(mul_public(x0, minus_one), mul_public(x1, minus_one))
    ).tolist() == [-1.0, 2.0]
    with pytest.raises(ParameterInvalid, match="integers"):
        mul_public(x0, 2.5)
