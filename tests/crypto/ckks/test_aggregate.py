from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from crypto.ckks import (
    CKKS_AGGREGATION,
    KeyAuthorityKeys,
    _tenseal,
    decrypt_aggregate,
    generate_keys,
    pack_class_major,
    weighted_sum,
)
from crypto.ckks.aggregate import _naf, integer_weights
from crypto.ckks.keys import _private_context
from crypto.ckks.packing import unpack_class_major
from crypto.errors import ContextMismatch, ParameterInvalid
from tests.tolerances import aggregate_tolerance


@given(st.integers(min_value=0, max_value=1 << 40))
def test_naf_represents_value_without_adjacent_digits(value: int) -> None:
    digits = _naf(value)
    assert sum(d << i for i, d in enumerate(digits)) == value
    assert all(not (a and b) for a, b in zip(digits, digits[1:], strict=False))


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=20))
def test_integer_weights_sum_exactly_and_round_each(raw: list[float]) -> None:
    total = sum(raw)
    assume(total > 0)
    w = [x / total for x in raw]
    assume(abs(sum(w) - 1.0) <= 1e-9)
    ints = integer_weights(w, 20)
    assert sum(ints) == 1 << 20
    assert all(abs(i - x * 2**20) < 1.0 for i, x in zip(ints, w, strict=True))


def _uploads(
    keys: KeyAuthorityKeys, rng: np.random.Generator, n: int = 3000, c: int = 3, p: int = 10
) -> tuple[list[np.ndarray], list]:
    xs = [rng.uniform(-8, 8, size=(n, c)) for _ in range(p)]
    return xs, [pack_class_major(keys.public_context, x) for x in xs]


def test_weighted_sum_meets_error_target(
    agg_keys: KeyAuthorityKeys, rng: np.random.Generator
) -> None:
    xs, ups = _uploads(agg_keys, rng)
    w = rng.dirichlet(np.ones(len(xs)))
    agg = weighted_sum(ups, w.tolist())
    assert agg.kind == "aggregate" and agg.contributors == 10 and agg.weight_bits == 20
    expected = sum(wk * x for wk, x in zip(w, xs, strict=True))
    # unflooded CKKS error stays below the preset's stated decryption bound
    ctx = _private_context(agg_keys)
    raw = unpack_class_major(agg.layout, [_tenseal.decrypt_vector(ctx, v) for v in agg.vectors])
    raw_err = np.abs(raw / 2**20 - expected).max()
    quant = 10 * 8 * 2.0**-20
    assert raw_err <= CKKS_AGGREGATION.decryption_error_bound + quant
    before = agg_keys.releases
    released = decrypt_aggregate(agg_keys, agg)
    assert agg_keys.releases == before + len(agg.vectors)  # each ciphertext counts
    err = np.abs(released - expected).max()
    assert err <= aggregate_tolerance(CKKS_AGGREGATION, values=released.size, extra=quant)
    assert err > raw_err  # flooding noise was added


def test_strict_preset_meets_the_same_target_with_tiny_ckks_error(rng: np.random.Generator) -> None:
    from crypto.ckks import PRESETS

    keys = generate_keys("CKKS_AGGREGATION_STRICT")
    xs, ups = _uploads(keys, rng, n=2048, c=2)
    xs.append(np.full((2048, 2), 8.0))
    ups.append(pack_class_major(keys.public_context, xs[-1]))
    w = rng.dirichlet(np.ones(len(xs)))
    agg = weighted_sum(ups, w.tolist())
    assert agg.vectors[0].ciphertext()[0].coeff_modulus_size() == 2  # no rescale happened
    ints = integer_weights(w.tolist(), 20)
    quantized = sum(i * x for i, x in zip(ints, xs, strict=True)) / 2**20
    ctx = _private_context(keys)
    raw = unpack_class_major(agg.layout, [_tenseal.decrypt_vector(ctx, v) for v in agg.vectors])
    bound = PRESETS["CKKS_AGGREGATION_STRICT"].decryption_error_bound
    assert np.abs(raw / 2**20 - quantized).max() <= bound
    expected = sum(wk * x for wk, x in zip(w, xs, strict=True))
    out = decrypt_aggregate(keys, agg)
    strict = PRESETS["CKKS_AGGREGATION_STRICT"]
    quant = len(xs) * 8 * 2.0 ** -(strict.weight_bits + 1)  # integer weights, rounded
    assert np.abs(out - expected).max() <= aggregate_tolerance(strict, values=out.size, extra=quant)


def test_extreme_inputs_and_weights_do_not_wrap(agg_keys: KeyAuthorityKeys) -> None:
    xs = [np.full((10, 2), 8.0), np.full((10, 2), 8.0), np.full((10, 2), -8.0)]
    ups = [pack_class_major(agg_keys.public_context, x) for x in xs]
    out = decrypt_aggregate(agg_keys, weighted_sum(ups, [0.5, 0.5, 0.0]))
    tolerance = aggregate_tolerance(CKKS_AGGREGATION, values=out.size)
    assert np.abs(out - 8.0).max() <= tolerance
    out = decrypt_aggregate(agg_keys, weighted_sum(ups, [0.0, 0.0, 1.0]), min_contributors=3)
    assert np.abs(out + 8.0).max() <= tolerance


@pytest.mark.parametrize(
    ("weights", "fragment"),
    [
        ([0.5, 0.6], "must sum to 1"),
        ([1.5, -0.5], "finite and nonnegative"),
        ([float("nan"), 1.0], "finite and nonnegative"),
        ([1.0], "one value per upload"),
    ],
)
def test_bad_weights_refused(
    agg_keys: KeyAuthorityKeys, weights: list[float], fragment: str
) -> None:
    ups = [pack_class_major(agg_keys.public_context, np.zeros((3, 2))) for _ in range(2)]
    with pytest.raises(ParameterInvalid, match=fragment):
        weighted_sum(ups, weights)


def test_mixed_epochs_and_shapes_refused(agg_keys: KeyAuthorityKeys) -> None:
    other = generate_keys("CKKS_AGGREGATION")
    a = pack_class_major(agg_keys.public_context, np.zeros((3, 2)))
    b = pack_class_major(other.public_context, np.zeros((3, 2)))
    with pytest.raises(ContextMismatch, match="another key epoch"):
        weighted_sum([a, b], [0.5, 0.5])
    c = pack_class_major(agg_keys.public_context, np.zeros((4, 2)))
    with pytest.raises(ParameterInvalid, match="another shape"):
        weighted_sum([a, c], [0.5, 0.5])
    with pytest.raises(ParameterInvalid, match="must not be empty"):
        weighted_sum([], [])
    agg = weighted_sum([a, a], [0.5, 0.5])
    with pytest.raises(ParameterInvalid, match="not an encrypted upload"):
        weighted_sum([agg, a], [0.5, 0.5])
    with pytest.raises(ContextMismatch, match="another key epoch than these keys"):
        decrypt_aggregate(other, agg)


def test_key_authority_refuses_single_uploads(agg_keys: KeyAuthorityKeys) -> None:
    a = pack_class_major(agg_keys.public_context, np.zeros((3, 2)))
    with pytest.raises(ParameterInvalid, match="decrypts only aggregates"):
        decrypt_aggregate(agg_keys, a)
    single = weighted_sum([a], [1.0])
    with pytest.raises(ParameterInvalid, match="over 1 uploads; at least 2 needed"):
        decrypt_aggregate(agg_keys, single)
    with pytest.raises(ParameterInvalid, match="min_contributors must be an integer >= 2"):
        decrypt_aggregate(agg_keys, single, min_contributors=1)
