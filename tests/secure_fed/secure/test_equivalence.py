"""The three modes publish the same soft labels and take the same decisions (tolerances stated)."""

from __future__ import annotations

import numpy as np
import pytest

from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.scoring.mahalanobis import PlainBackend, pooled_mahalanobis
from tests.secure_fed.secure.conftest import IDS, C, K, N
from tests.secure_fed.secure.helpers import BOUND, excluded, population

#: Scores: relative 1e-3 (CKKS noise and flooding 2^-11, ring resolution 2^-12).
SCORE_RTOL = 1e-3
#: Soft labels: absolute 5e-3 (CKKS flooding sigma 2^-11 over 3000 values; ring 2^-12).
LABEL_ATOL = 5e-3


def _run(dep: SecureDeployment, preds: dict[str, np.ndarray]) -> tuple[dict, set, np.ndarray]:
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    scores = agg.score(handles, round_id=1).scores
    out = excluded(scores, dof=C - 1)
    kept = {p: h for p, h in handles.items() if p not in out}
    weights = {p: 1.0 / len(kept) for p in kept}
    return scores, out, agg.reveal(agg.weighted_sum(kept, weights), round_id=1)


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_secure_modes_match_the_plaintext_reference(
    mode: str, request: pytest.FixtureRequest
) -> None:
    preds = population(K, N, C, seed=11, attackers=1, attack="scaling")
    ref = pooled_mahalanobis(PlainBackend(preds), IDS, num_samples=N).scores
    ref_excluded = excluded(ref, dof=C - 1)
    assert ref_excluded == {"p05"}
    ref_labels = np.mean([preds[p] for p in IDS if p not in ref_excluded], axis=0)
    dep, _ = request.getfixturevalue(mode)
    scores, out, labels = _run(dep, preds)
    assert out == ref_excluded
    for p in IDS:
        assert scores[p] == pytest.approx(ref[p], rel=SCORE_RTOL)
    np.testing.assert_allclose(labels, ref_labels, atol=LABEL_ATOL)
