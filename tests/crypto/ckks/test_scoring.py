from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import (
    CKKS_SCORING,
    KeyAuthorityKeys,
    decrypt_score,
    load_encrypted,
    pack_class_major,
    quadratic_score,
    weighted_sum,
)
from crypto.errors import ParameterInvalid
from tests.tolerances import aggregate_tolerance, score_tolerance


def _problem(rng: np.random.Generator, n: int, c: int) -> tuple[np.ndarray, ...]:
    x = np.clip(rng.normal(0.0, 1.0, size=(n, c)), -8, 8)
    mu = np.clip(rng.normal(0.0, 0.3, size=(n, c)), -8, 8)
    a = rng.normal(size=(c, c))
    sigma = a @ a.T / c + np.eye(c)
    whitening = np.linalg.cholesky(np.linalg.inv(sigma)).T
    expected = float(np.mean(np.sum(((x - mu) @ whitening.T) ** 2, axis=1)))
    return x, mu, whitening, np.float64(expected)


def test_encrypted_score_within_relative_budget(
    score_keys: KeyAuthorityKeys, rng: np.random.Generator
) -> None:
    x, mu, whitening, expected = _problem(rng, 5000, 4)
    pub = score_keys.public_context
    upload = pack_class_major(pub, x)
    score = quadratic_score(upload, mu, whitening)
    wire = load_encrypted(pub, score.to_bytes(), kind="score", n_samples=5000, n_classes=4)
    released = decrypt_score(score_keys, wire)
    assert abs(released - expected) <= score_tolerance(CKKS_SCORING, expected)


def test_scoring_preset_weighted_sum_uses_scalar_multiply(
    score_keys: KeyAuthorityKeys, rng: np.random.Generator
) -> None:
    from crypto.ckks import decrypt_aggregate

    xs = [rng.uniform(-8, 8, size=(50, 2)) for _ in range(3)]
    ups = [pack_class_major(score_keys.public_context, x) for x in xs]
    agg = weighted_sum(ups, [0.2, 0.3, 0.5])
    assert agg.weight_bits == 0
    got = decrypt_aggregate(score_keys, agg)
    err = np.abs(got - (0.2 * xs[0] + 0.3 * xs[1] + 0.5 * xs[2])).max()
    assert err <= aggregate_tolerance(CKKS_SCORING, values=got.size)


def test_score_refusals(agg_keys: KeyAuthorityKeys, score_keys: KeyAuthorityKeys) -> None:
    up = pack_class_major(agg_keys.public_context, np.zeros((4, 2)))
    with pytest.raises(ParameterInvalid, match="CKKS_AGGREGATION is not one"):
        quadratic_score(up, np.zeros((4, 2)), np.eye(2))
    up = pack_class_major(score_keys.public_context, np.zeros((4, 2)))
    with pytest.raises(ParameterInvalid, match="center must have shape"):
        quadratic_score(up, np.zeros((3, 2)), np.eye(2))
    with pytest.raises(ParameterInvalid, match="whitening must be 2x2"):
        quadratic_score(up, np.zeros((4, 2)), np.eye(3))
    with pytest.raises(ParameterInvalid, match="whitening is too large"):
        quadratic_score(up, np.zeros((4, 2)), np.eye(2) * 1e4)
    with pytest.raises(ParameterInvalid, match="must not be all zeros"):
        quadratic_score(up, np.zeros((4, 2)), np.zeros((2, 2)))
    with pytest.raises(ParameterInvalid, match="decrypts only scores"):
        decrypt_score(score_keys, up)


def test_small_scores_get_the_noise_of_a_score_of_one(
    score_keys: KeyAuthorityKeys, rng: np.random.Generator
) -> None:
    mu = rng.uniform(-1, 1, size=(300, 3))
    up = pack_class_major(score_keys.public_context, mu + 0.01)
    released = [decrypt_score(score_keys, quadratic_score(up, mu, np.eye(3))) for _ in range(3)]
    expected = 3 * 0.01**2
    errors = [abs(r - expected) for r in released]
    assert max(errors) <= 5.5 * 2.0**-13 + 2.0**-15
    assert len(set(released)) == 3  # fresh noise per release


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_center_or_whitening_is_refused_whichever_the_other_is(
    score_keys: KeyAuthorityKeys, bad: float
) -> None:
    # one finite argument must not vouch for the other: with ``and`` read as ``or`` a NaN
    # whitening under a finite centre reached the encrypted score
    up = pack_class_major(score_keys.public_context, np.zeros((4, 2)))
    center, whitening = np.zeros((4, 2)), np.eye(2)
    bad_center = center.copy()
    bad_center[1, 0] = bad
    bad_whitening = whitening.copy()
    bad_whitening[0, 1] = bad
    for mu, lt in ((bad_center, whitening), (center, bad_whitening)):
        with pytest.raises(
            ParameterInvalid, match=r"^\[[A-Z_]+\] center and whitening must be finite$"
        ):
            quadratic_score(up, mu, lt)
