"""Squared Mahalanobis distance on shares, as the outlier filter computes it.

Pipeline (docs/crypto-shares.md, "Outlier score"): d = x - mean (local), w = M d with
public M = Sigma^-1 (local, no truncation), u = d * w elementwise (one Beaver
multiplication), sum over classes and samples (local), open one scalar, decode with
2f + f_M fractional bits. No truncation anywhere, so the result is exact in the ring;
the overflow proof is quadratic_form_bound, checked here at its boundary.
"""

import numpy as np
import pytest

from crypto.errors import EncodingOverflow, ParameterInvalid
from crypto.shares import (
    RING_PREDICTIONS,
    ShareLabel,
    ShareMacKey,
    deal_triples,
    encode_quadratic_form,
    reconstruct,
    secure_multiply,
    split,
)
from crypto.shares._ring import RingArray, signed, to_ring_int
from crypto.shares.bounds import MAX_MATRIX_FRAC_BITS, quadratic_form_bound
from crypto.shares.linear import matmul_public, sub_public, sum_axis

CODEC = RING_PREDICTIONS
CHANNEL = ShareMacKey.generate(recipient="aggregator<->helper")
LABEL = ShareLabel(round_id=5, participant_id="hospital-1", tensor="mahalanobis")


def secure_quadratic_sum(x: RingArray, mean: RingArray, matrix: RingArray) -> int:
    x0, x1 = split(x)
    d0, d1 = sub_public(x0, mean, party=0), sub_public(x1, mean, party=1)
    w0, w1 = matmul_public(d0, matrix), matmul_public(d1, matrix)
    u0, u1 = secure_multiply(
        (d0, d1), (w0, w1), deal_triples(x.size, label=LABEL), channel_key=CHANNEL
    )
    return int(signed(reconstruct(sum_axis(u0), sum_axis(u1))).item())


def exact_quadratic_sum(x: RingArray, mean: RingArray, matrix: RingArray) -> int:
    d = [
        [a - b for a, b in zip(r, m, strict=True)]
        for r, m in zip(signed(x).tolist(), signed(mean).tolist(), strict=True)
    ]
    mat = signed(matrix).tolist()
    return sum(
        sum(
            dc * sum(mc * dj for mc, dj in zip(mrow, row, strict=True))
            for dc, mrow in zip(row, mat, strict=True)
        )
        for row in d
    )


def test_score_matches_plaintext_mahalanobis() -> None:
    rng = np.random.default_rng(7)  # test data only; shares still use os.urandom
    n, c = 2000, 10
    logits = np.clip(rng.normal(0, 2, (n, c)) + rng.normal(0, 1, (1, c)), -8, 8)
    mean = np.clip(logits + rng.normal(0, 0.5, (n, c)), -8, 8)
    cov = np.cov((logits - mean).T) + 0.05 * np.eye(c)
    inv = np.linalg.inv(cov)
    encoded = encode_quadratic_form(CODEC, inv, n_samples=n)
    assert encoded.frac_bits >= 10
    x_enc, mean_enc = CODEC.encode(logits), CODEC.encode(mean)
    total = secure_quadratic_sum(x_enc, mean_enc, encoded.values)
    assert total == exact_quadratic_sum(x_enc, mean_enc, encoded.values)
    score = total / 2.0 ** (2 * CODEC.frac_bits + encoded.frac_bits) / n
    dev = logits - mean
    expected = float(np.mean(np.einsum("ic,cd,id->i", dev, inv, dev)))
    assert abs(score - expected) <= 1e-3 * expected


def test_quadratic_form_at_its_boundary() -> None:
    # Worst case: x = +B everywhere, mean = -B, so every d = 2B (D = 2^16 in the ring),
    # and M has non-negative rows summing to R. The sum is then exactly N*C*D*R*D
    # = 2^36 * R for N = C = 4, so R_max = 2^27 - 1 is the largest row sum that fits.
    n, c, r_max = 4, 4, 2**27 - 1
    assert quadratic_form_bound(CODEC, r_max, n, c) == 2**63 - 2**36
    with pytest.raises(EncodingOverflow, match="quadratic form"):
        quadratic_form_bound(CODEC, r_max + 1, n, c)
    x = CODEC.encode(np.full((n, c), 8.0))
    mean = CODEC.encode(np.full((n, c), -8.0))
    row = [r_max // c] * (c - 1) + [r_max - (c - 1) * (r_max // c)]
    matrix = to_ring_int(np.array([row] * c))
    assert secure_quadratic_sum(x, mean, matrix) == 2**63 - 2**36  # exact, no wrap
    row[0] += 1  # one unit past the bound: the ring wraps to -2^63
    over = to_ring_int(np.array([row] * c))
    assert secure_quadratic_sum(x, mean, over) == -(2**63)


def test_encode_quadratic_form_picks_the_most_bits_that_fit() -> None:
    matrix = np.array([[2.0, -0.5], [-0.5, 1.5]])
    for n in (10, 10_000, 1_000_000):
        enc = encode_quadratic_form(CODEC, matrix, n_samples=n)
        quadratic_form_bound(CODEC, enc.row_abs_sum, n, 2)
        if enc.frac_bits < MAX_MATRIX_FRAC_BITS:
            one_more = np.rint(matrix * 2 ** (enc.frac_bits + 1)).astype(np.int64)
            with pytest.raises(EncodingOverflow):
                quadratic_form_bound(CODEC, int(np.abs(one_more).sum(axis=1).max()), n, 2)
        assert signed(enc.values).tolist() == np.rint(matrix * 2**enc.frac_bits).tolist()
    assert encode_quadratic_form(CODEC, matrix, n_samples=10).frac_bits == 25
    small = encode_quadratic_form(CODEC, matrix / 100, n_samples=1)
    assert small.frac_bits == MAX_MATRIX_FRAC_BITS  # capped even when more would fit


def test_encode_quadratic_form_errors() -> None:
    with pytest.raises(ParameterInvalid, match="square"):
        encode_quadratic_form(CODEC, np.ones((2, 3)), n_samples=1)
    with pytest.raises(EncodingOverflow, match="non-finite"):
        encode_quadratic_form(CODEC, np.array([[np.nan]]), n_samples=1)
    with pytest.raises(EncodingOverflow, match="too large"):
        encode_quadratic_form(CODEC, np.full((10, 10), 1e9), n_samples=10_000)
