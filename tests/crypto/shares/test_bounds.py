"""Overflow proofs at the boundary: K_max participants, maximal values, and one step
past each bound to show the bound is needed (the ring really wraps there).

Repeating one summand T times is the same ring computation as ``mul_public(share, T)``
(both are T-fold addition in Z_2^64), which lets a test reach 2^33 summands exactly.
"""

import numpy as np
import pytest

from crypto.errors import EncodingOverflow, ParameterInvalid
from crypto.shares import (
    RING_PREDICTIONS,
    RING_WEIGHTS,
    ShareLabel,
    ShareMacKey,
    deal_triples,
    expand_seed,
    reconstruct,
    secure_multiply,
    split,
    split_with_seed,
)
from crypto.shares._ring import signed
from crypto.shares.bounds import product_sum_bound, sum_bound
from crypto.shares.linear import add, mul_public, sum_axis

CODEC = RING_PREDICTIONS
K_MAX = CODEC.max_participants
CHANNEL = ShareMacKey.generate(recipient="servers")


@pytest.mark.parametrize("value", [8.0, -8.0])
def test_sum_of_k_max_participants_at_the_clip_bound(value: float) -> None:
    # Every participant uploads share0 to the aggregator and a seed to the helper;
    # each server adds what it holds; only the sum is opened.
    n = 16
    agg = np.zeros(n, dtype=np.uint64)
    helper = np.zeros(n, dtype=np.uint64)
    for k in range(K_MAX):
        label = ShareLabel(round_id=1, participant_id=f"p{k}", tensor="predictions")
        share0, seed = split_with_seed(CODEC.encode(np.full(n, value)), label=label)
        agg = add(agg, share0)
        helper = add(helper, expand_seed(seed, label, n))
    total = reconstruct(agg, helper)
    assert signed(total).tolist() == [K_MAX * int(value) * 4096] * n
    assert CODEC.decode(total).tolist() == [K_MAX * value] * n
    CODEC.check_participants(K_MAX)
    with pytest.raises(EncodingOverflow, match="exceed K_max"):
        CODEC.check_participants(K_MAX + 1)


def test_sum_bound_is_tight_where_the_ring_wraps() -> None:
    # B * 2^f = 2^15, so 2^48 summands of +B reach 2^63 and wrap to -2^63.
    limit = 2**48
    assert sum_bound(CODEC, limit - 1) == (limit - 1) * 2**15
    with pytest.raises(EncodingOverflow, match="64 bits"):
        sum_bound(CODEC, limit)
    x0, x1 = split(CODEC.encode([8.0]))
    ok = reconstruct(mul_public(x0, limit - 1), mul_public(x1, limit - 1))
    assert signed(ok).item() == (limit - 1) * 2**15
    wrapped = reconstruct(mul_public(x0, limit), mul_public(x1, limit))
    assert signed(wrapped).item() == -(2**63)  # wrapped: the bound is necessary


def test_weighted_sum_of_k_max_participants() -> None:
    # Public weights from RING_WEIGHTS (|w| <= 1, 16 bits); no truncation: the opened
    # sum is decoded with f + 16 fractional bits. Bound K * 2^15 * 2^16 = 2^41.
    assert product_sum_bound(CODEC, RING_WEIGHTS, K_MAX) == 2**41
    weights = RING_WEIGHTS.encode(np.ones(K_MAX))  # w = 1.0 for all: the worst case
    agg = np.zeros(4, dtype=np.uint64)
    helper = np.zeros(4, dtype=np.uint64)
    for k in range(K_MAX):
        x0, x1 = split(CODEC.encode(np.full(4, 8.0)))
        agg = add(agg, mul_public(x0, weights[k]))
        helper = add(helper, mul_public(x1, weights[k]))
    total = reconstruct(agg, helper)
    assert CODEC.decode(total, frac_bits=12 + 16).tolist() == [8.0 * K_MAX] * 4


def test_second_moments_bound_at_k_max_and_max_samples() -> None:
    # Pooled second moments sum_k sum_i x_kic * x_kic' carry 2f bits; each term is at
    # most (2^15)^2 = 2^30, so T = K * N terms need T < 2^33: N_max = 2^23 - 1 at K_max.
    n_max = 2**33 // K_MAX - 1
    assert n_max == 2**23 - 1
    product_sum_bound(CODEC, CODEC, K_MAX * n_max)
    with pytest.raises(EncodingOverflow):
        product_sum_bound(CODEC, CODEC, 2**33)
    label = ShareLabel(round_id=1, participant_id="pooled", tensor="moments")
    x = CODEC.encode([8.0, -8.0])
    z0, z1 = secure_multiply(
        split(x), split(CODEC.encode([8.0, 8.0])), deal_triples(2, label=label), channel_key=CHANNEL
    )
    terms = K_MAX * n_max
    total = reconstruct(mul_public(z0, terms), mul_public(z1, terms))
    assert signed(total).tolist() == [terms * 2**30, -terms * 2**30]
    over = reconstruct(mul_public(z0, 2**33), mul_public(z1, 2**33))
    assert signed(over).tolist() == [-(2**63), -(2**63)]  # +2^63 wrapped


def test_bound_argument_errors() -> None:
    from crypto.shares.bounds import quadratic_form_bound

    with pytest.raises(ParameterInvalid, match="n_samples"):
        quadratic_form_bound(CODEC, 1, 0, 3)


def test_sum_axis_of_many_terms_matches_python_ints() -> None:
    x = CODEC.encode(np.full((K_MAX, 3), -8.0))
    x0, x1 = split(x)
    total = reconstruct(sum_axis(x0, 0), sum_axis(x1, 0))
    assert signed(total).tolist() == [-K_MAX * 2**15] * 3
