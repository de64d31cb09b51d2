"""The three modes publish the same soft labels and take the same decisions (tolerances stated)."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.scoring.mahalanobis import PlainBackend, pooled_mahalanobis
from secure_fed.secure.scoring.outlier import OutlierPolicy
from tests.secure_fed.secure.conftest import IDS, C, K, N
from tests.secure_fed.secure.helpers import BOUND, population

#: Scores: relative 1e-3 (CKKS noise and flooding 2^-11, ring resolution 2^-12).
SCORE_RTOL = 1e-3
#: Soft labels: absolute 5e-3 (CKKS flooding sigma 2^-11 over 3000 values; ring 2^-12).
LABEL_ATOL = 5e-3


def _run(dep: SecureDeployment, preds: dict[str, np.ndarray]) -> tuple[dict, set, np.ndarray]:
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    scores = agg.score(handles, None)
    excluded = OutlierPolicy(dof=C - 1).decide(scores)
    kept = {p: h for p, h in handles.items() if p not in excluded}
    weights = {p: 1.0 / len(kept) for p in kept}
    return scores, excluded, agg.reveal(agg.weighted_sum(kept, weights))


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_secure_modes_match_the_plaintext_reference(mode: str,
                                                   request: pytest.FixtureRequest) -> None:
    preds = population(K, N, C, seed=11, attackers=1, attack="scaling")
    ref = pooled_mahalanobis(PlainBackend(preds), IDS, num_samples=N).scores
    ref_excluded = OutlierPolicy(dof=C - 1).decide(ref)
    assert ref_excluded == {"p05"}
    ref_labels = np.mean([preds[p] for p in IDS if p not in ref_excluded], axis=0)
    dep, _ = request.getfixturevalue(mode)
    scores, excluded, labels = _run(dep, preds)
    assert excluded == ref_excluded
    for p in IDS:
        assert scores[p] == pytest.approx(ref[p], rel=SCORE_RTOL)
    np.testing.assert_allclose(labels, ref_labels, atol=LABEL_ATOL)
