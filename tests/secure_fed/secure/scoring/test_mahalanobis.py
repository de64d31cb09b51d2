from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import ScoringInvalid
from secure_fed.secure.scoring.mahalanobis import (
    PlainBackend,
    ScoringConfig,
    helmert_basis,
    pooled_covariance,
    pooled_mahalanobis,
    quadratic_scores,
    whitening,
)
from tests.secure_fed.secure.helpers import population


def test_helmert_is_orthonormal_and_sum_zero() -> None:
    h = helmert_basis(10)
    assert h.shape == (9, 10)
    np.testing.assert_allclose(h @ h.T, np.eye(9), atol=1e-12)
    np.testing.assert_allclose(h @ np.ones(10), 0.0, atol=1e-12)


def test_whitening_is_the_projected_precision() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 6))
    cov = a @ a.T + np.eye(6)
    w = whitening(cov, ridge=0.0)
    h = helmert_basis(6)
    np.testing.assert_allclose(w.T @ w, h.T @ np.linalg.inv(h @ cov @ h.T) @ h, atol=1e-9)


def test_scores_ignore_per_sample_shifts_and_probability_simplex() -> None:
    preds = population(5, 200, 4, seed=1)
    backend = PlainBackend(preds)
    base = pooled_mahalanobis(backend, sorted(preds), num_samples=200).scores
    shift = np.random.default_rng(2).normal(size=(200, 1))
    shifted = {p: m + shift for p, m in preds.items()}
    again = pooled_mahalanobis(PlainBackend(shifted), sorted(preds), num_samples=200).scores
    for p in preds:
        assert again[p] == pytest.approx(base[p], rel=1e-6)
    probs = {p: np.exp(m) / np.exp(m).sum(axis=1, keepdims=True) for p, m in preds.items()}
    scores = pooled_mahalanobis(PlainBackend(probs), sorted(probs), num_samples=200).scores
    assert all(np.isfinite(s) and s >= 0 for s in scores.values())  # singular Σ is handled


def test_mean_score_of_the_pooled_set_is_the_dof() -> None:
    preds = population(6, 300, 5, seed=3)
    cfg = ScoringConfig(c_steps=0, ridge=0.0)
    report = pooled_mahalanobis(PlainBackend(preds), sorted(preds), num_samples=300, config=cfg)
    assert np.mean(list(report.scores.values())) == pytest.approx(report.dof, rel=1e-6)
    assert report.dof == 4


def test_c_step_unmasks_colluding_attackers() -> None:
    preds = population(10, 300, 10, seed=4, attackers=3, attack="sign_flip")
    backend = PlainBackend(preds)
    pooled = pooled_mahalanobis(
        backend, sorted(preds), num_samples=300, config=ScoringConfig(c_steps=0)
    ).scores
    robust = pooled_mahalanobis(backend, sorted(preds), num_samples=300).scores
    attackers = ["p07", "p08", "p09"]
    assert max(pooled[a] for a in attackers) < 27.9  # masked: below the chi2(9) 0.999 cut
    honest = max(robust[p] for p in preds if p not in attackers)
    assert honest < 27.9 < 3 * 27.9 < min(robust[a] for a in attackers)


def test_quadratic_scores_match_the_definition() -> None:
    rng = np.random.default_rng(5)
    p, c = rng.normal(size=(50, 3)), rng.normal(size=(50, 3))
    w = rng.normal(size=(2, 3))
    expected = np.mean([(p[i] - c[i]) @ w.T @ w @ (p[i] - c[i]) for i in range(50)])
    assert quadratic_scores({"a": p}, c, w)["a"] == pytest.approx(expected)


@pytest.mark.parametrize(
    "field,value",
    [
        ("moment_samples", 0),
        ("ridge", -1.0),
        ("c_steps", 9),
        ("subset_fraction", 0.0),
        ("min_subset", 0),
    ],
)
def test_config_is_validated(field: str, value: float) -> None:
    with pytest.raises(ScoringInvalid, match=field):
        ScoringConfig(**{field: value})


def test_invalid_inputs_raise_typed_errors() -> None:
    with pytest.raises(ScoringInvalid, match="at least two"):
        pooled_mahalanobis(PlainBackend({"a": np.zeros((3, 2))}), ["a"], num_samples=3)
    with pytest.raises(ScoringInvalid, match="num_classes"):
        helmert_basis(1)
    with pytest.raises(ScoringInvalid, match="positive definite"):
        whitening(np.zeros((3, 3)), ridge=0.0)
    with pytest.raises(ScoringInvalid, match="square"):
        pooled_covariance(second_moment=np.zeros((2, 3)), count=1, samples=1)
    with pytest.raises(ScoringInvalid, match="count"):
        pooled_covariance(second_moment=np.eye(2), count=0, samples=1)
