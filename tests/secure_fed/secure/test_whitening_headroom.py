"""Encrypted scores fit the last prime by construction, however closely participants agree.

A ckks round failed with SCORING_INVALID "whitening is too large" when the few
scored participants (2-4) nearly agreed (after a round of distillation): the
pooled covariance then has eigenvalues near 0, the relative ridge leaves them
there, and the worst-case score of an upload within the public bound exceeds
what ``CKKS_SCORING``'s last prime holds. The first test replays that failure
with the pre-fix whitening on real ciphertexts; the others show the floored
whitening scores the same round under encryption as the plaintext reference
does, still excludes an upload that deviates along the direction the honest
ones agree on, and bounds the gain for any covariance.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crypto.ckks.aggregate import max_score_gain
from crypto.ckks.presets import CKKS_SCORING
from crypto.errors import ParameterInvalid
from secure_fed.secure.computation import ckks_scoring
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.scoring.mahalanobis import (
    PlainBackend,
    ScoringConfig,
    eigenvalue_floor,
    helmert_basis,
    lowest_scores,
    pooled_covariance,
    pooled_mahalanobis,
    whitening,
)
from tests.secure_fed.secure.helpers import BOUND, excluded, population

N, C = 300, 4
IDS = ["bank-2", "hospital-1", "hospital-3", "hospital-4"]
#: Scores: relative 1e-3 (CKKS noise and flooding), as the modes' equivalence test.
SCORE_RTOL = 1e-3


@pytest.fixture(scope="module")
def ckks() -> SecureDeployment:
    return SecureDeployment.create(
        mode="ckks", shape=(N, C), participant_ids=IDS, min_participants=2
    )


def _agreeing(seed: int = 5) -> dict[str, np.ndarray]:
    """Four participants whose predictions agree to 0.01 logits (as after distillation)."""
    preds = population(len(IDS), N, C, seed=seed, spread=0.01)
    return {pid: preds[f"p{j:02d}"] for j, pid in enumerate(IDS)}


def _handles(dep: SecureDeployment, preds: dict[str, np.ndarray]) -> tuple[Any, dict[str, Any]]:
    agg = dep.aggregator(bound=BOUND)
    return agg, {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}


def _round_covariance(preds: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """The covariance pooled_mahalanobis opens: ranking pass, lowest subset, its moments."""
    backend, cfg = PlainBackend(preds), ScoringConfig()
    subset = lowest_scores(backend.ranking_scores(sorted(preds), N), cfg.subset_size(len(preds)))
    moment = backend.moments(subset, N)
    return pooled_covariance(second_moment=moment, count=len(subset), samples=N), subset


def test_the_unfloored_whitening_of_an_agreeing_round_overflows_the_last_prime(
    ckks: SecureDeployment,
) -> None:
    preds = _agreeing()
    cov, subset = _round_covariance(preds)
    h = helmert_basis(C)
    assert np.linalg.eigvalsh(h @ cov @ h.T).min() < eigenvalue_floor(C, N) / 4
    agg, handles = _handles(ckks, preds)
    uploads = agg.scoring_round(handles, round_id=1).uploads
    centre = [uploads[p] for p in subset]
    old = whitening(cov, ridge=ScoringConfig().ridge)  # the whitening before the floor
    with pytest.raises(ParameterInvalid, match="whitening is too large"):
        ckks_scoring.score(uploads[IDS[0]], centre, old, N)
    floored = whitening(cov, ridge=ScoringConfig().ridge, rows=N)
    assert ckks_scoring.score(uploads[IDS[0]], centre, floored, N).kind == "score"


#: Absolute tolerance of a decrypted score: 7 sigma of its noise flooding.
FLOOD_ATOL = 8.5e-4


def test_an_agreeing_round_is_scored_under_encryption_as_in_plaintext(
    ckks: SecureDeployment,
) -> None:
    preds = _agreeing()
    deviant = preds[IDS[-1]].copy()
    deviant[:, 0] += 0.25  # along a direction the honest participants agree on to 0.01
    deviant[:, 1] -= 0.25
    preds[IDS[-1]] = deviant
    reference = pooled_mahalanobis(PlainBackend(preds), IDS, num_samples=N).scores
    assert excluded(reference, dof=C - 1) == {IDS[-1]}
    agg, handles = _handles(ckks, preds)
    scores = agg.score(handles, round_id=2).scores
    for pid in IDS:
        # relative 1e-3, or 7 sigma of a score's flooding (about 1.2e-4) for a small score
        assert scores[pid] == pytest.approx(reference[pid], rel=SCORE_RTOL, abs=FLOOD_ATOL)
    assert excluded(scores, dof=C - 1) == {IDS[-1]}


@pytest.mark.parametrize("rows", [1, N, 4096, 50_000])
@pytest.mark.parametrize("classes", [2, 4, 10])
def test_the_floored_gain_fits_for_any_covariance(rows: int, classes: int) -> None:
    rng = np.random.default_rng(classes * rows)
    a = rng.normal(size=(classes, classes))
    tiny = rng.normal(size=(classes, 1))
    for cov in (np.zeros((classes, classes)), 1e-12 * a @ a.T, tiny @ tiny.T, a @ a.T):
        w = whitening(cov, ridge=1e-6, rows=rows)
        gain = float(np.linalg.norm(w, 2)) ** 2
        assert gain <= max_score_gain(CKKS_SCORING, classes, rows) / 2 * (1 + 1e-9)


def test_a_round_above_the_floor_is_scored_as_before() -> None:
    preds = population(4, N, C, seed=2, spread=0.4)
    cov, _ = _round_covariance({f"p{j}": m for j, m in enumerate(preds.values())})
    h = helmert_basis(C)
    assert np.linalg.eigvalsh(h @ cov @ h.T).min() > eigenvalue_floor(C, N)
    np.testing.assert_array_equal(whitening(cov, ridge=1e-6, rows=N), whitening(cov, ridge=1e-6))
