"""Central DP cannot be bypassed by asking for the published aggregate under another purpose.

The noise is decided by the release plan's step, not by the request's label:
the publication is the round's only first-order release, and it alone is noised
and charged. The aggregator (holding its own signing key) sends the very
ciphertext of a weighted sum under "moments", "score" and "mean": each is refused
with a typed error before anything is decrypted and nothing is charged (that the
publication itself is noised and charged with the plan's cap is
``tests/secure_fed/secure/test_central_dp.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from secure_fed.errors import AuthorityRequestMalformed, DecryptionRefused
from secure_fed.learning.budget_gate import InMemoryBudgetGate
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.central_dp import CentralDP
from secure_fed.secure.parties.key_authority import decryption_request
from tests.secure_fed.secure.helpers import BOUND, population

N, C, ROUND = 64, 4, 6
IDS = ["a", "b", "c", "d"]
ASSET = "private-train"


def _ask(dep: Any, purpose: str, claim: dict[str, Any], shape: tuple[int, int], ct: bytes) -> Any:
    request = decryption_request(
        round_id=ROUND,
        purpose=purpose,
        participant_ids=[u[0] for u in claim["uploads"]],
        shape=shape,
        ciphertext=ct,
        signer=dep.server_keys().signer,
        claim=claim,
    )
    return dep.authority.handle(request)


def test_the_aggregate_under_another_purpose_is_refused_and_not_charged() -> None:
    gate = InMemoryBudgetGate(epsilon=50.0, delta=1e-5)
    dp = CentralDP(noise_multiplier=2.0, asset_id=ASSET, bound=BOUND, max_weight=0.5)
    dep: Any = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        central_dp=dp,
        budget=gate,
    )
    preds = dict(zip(IDS, population(4, N, C, seed=3).values(), strict=True))
    agg = dep.aggregator(bound=BOUND)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    backend = agg.scoring_round(handles, round_id=ROUND)
    backend.ranking_scores(IDS, backend.samples)  # the plan now expects the subset's moments
    subset = list(agg._plans[ROUND].subset)
    aggregate = agg.weighted_sum(handles, {p: 1 / len(subset) if p in subset else 0.0 for p in IDS})
    ct, uploads = aggregate.matrix.to_bytes(), aggregate.claim["uploads"]
    moments = {"op": "moments", "uploads": uploads, "centre": uploads, "samples": backend.samples}
    with pytest.raises(DecryptionRefused, match="moments are 10 sums"):
        _ask(dep, "moments", moments, (N, C), ct)  # the first-order matrix as "moments"
    with pytest.raises(AuthorityRequestMalformed, match="preset id 4, not CKKS_SCORING"):
        _ask(dep, "moments", moments, (1, 10), ct)  # the publication epoch betrays it
    score = {
        "op": "score",
        "uploads": uploads[:1],
        "centre": uploads,
        "samples": backend.samples,
        "whitening": np.eye(C).tolist(),
        "step": "ranking",
        "roster": IDS,
    }
    with pytest.raises(DecryptionRefused):
        _ask(dep, "score", score, (N, C), ct)
    with pytest.raises(DecryptionRefused, match="no means"):
        _ask(dep, "mean", {"op": "mean", "uploads": uploads}, (N, C), ct)
    assert all(gate.epsilon_spent(p, ASSET) == 0 for p in IDS)  # nothing charged
    assert [r.purpose for r in dep.authority.log if r.released] == ["score"] * len(IDS)
