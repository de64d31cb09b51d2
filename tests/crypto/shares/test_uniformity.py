"""A single share reveals nothing: it is uniform over Z_2^64 whatever the secret.

Shares come from the CSPRNG, so these are statistical tests with many samples and a
loose threshold (p < 1e-9 rejects). The self-tests at the bottom show the same
statistics do reject broken generators, so the tests can fail.
"""

import numpy as np
import pytest
from scipy import stats

from crypto.shares import RING_PREDICTIONS, ShareLabel, split, split_with_seed
from crypto.shares.beaver import deal_triples

SAMPLES = 200_000
P_REJECT = 1e-9


def byte_chi2_pvalue(shares: np.ndarray) -> float:
    counts = np.bincount(shares.astype("<u8").view(np.uint8), minlength=256)
    return float(stats.chisquare(counts).pvalue)


def worst_bit_pvalue(shares: np.ndarray) -> float:
    bits = np.unpackbits(shares.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1)
    ones = bits.sum(axis=0).astype(np.float64)
    n = bits.shape[0]
    z = np.abs(ones - n / 2) / np.sqrt(n / 4)
    # Bonferroni over the 64 bit positions.
    return float(min(1.0, 64 * 2 * stats.norm.sf(z.max())))


def assert_uniform(shares: np.ndarray) -> None:
    assert byte_chi2_pvalue(shares) > P_REJECT
    assert worst_bit_pvalue(shares) > P_REJECT


@pytest.mark.parametrize("secret", [0.0, 8.0, -3.25])
def test_each_share_of_a_constant_is_uniform(secret: float) -> None:
    encoded = RING_PREDICTIONS.encode(np.full(SAMPLES, secret))
    share0, share1 = split(encoded)
    assert_uniform(share0)
    assert_uniform(share1)


def test_seeded_shares_are_uniform() -> None:
    encoded = RING_PREDICTIONS.encode(np.full(SAMPLES, 1.0))
    label = ShareLabel(round_id=1, participant_id="p", tensor="t")
    share0, _seed = split_with_seed(encoded, label=label)
    assert_uniform(share0)


def test_triple_shares_are_uniform() -> None:
    label = ShareLabel(round_id=1, participant_id="servers", tensor="beaver")
    p0, p1 = deal_triples(SAMPLES // 4, label=label, seeded=True)
    for part in (*p0.parts(), *p1.parts()):
        assert_uniform(part)


def test_statistics_reject_broken_generators() -> None:
    rng = np.random.default_rng(1)  # test-only generator for the broken cases below
    zero = np.zeros(SAMPLES, dtype=np.uint64)
    short = rng.integers(0, 2**56, SAMPLES, dtype=np.uint64)  # top byte always zero
    low_bit_stuck = rng.integers(0, 2**63, SAMPLES, dtype=np.uint64) << np.uint64(1)
    biased = np.where(rng.random(SAMPLES) < 0.51, 0, 1).astype(np.uint64) << np.uint64(17)
    biased |= rng.integers(0, 2**17, SAMPLES, dtype=np.uint64)
    biased |= rng.integers(0, 2**46, SAMPLES, dtype=np.uint64) << np.uint64(18)
    for broken in (zero, short, low_bit_stuck):
        assert byte_chi2_pvalue(broken) < P_REJECT
        assert worst_bit_pvalue(broken) < P_REJECT
    # A 51/49 bias on a single bit is caught by the per-bit test.
    assert worst_bit_pvalue(biased) < P_REJECT
    # Sharing with x - x (share equals the secret) would expose it: not uniform.
    encoded = RING_PREDICTIONS.encode(np.full(SAMPLES, 1.0))
    assert byte_chi2_pvalue(encoded) < P_REJECT
