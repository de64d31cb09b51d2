"""What an evidence claim and an evidence request must say, before any ciphertext or share.

A CKKS decryption request for the evidence step claims ``op: evidence`` with the
labeled slice it applies (rows and labels, as many as its ``samples``) and nothing a
score has (centre, whitening); the key authority reads the slice from the claim and
the plan refuses any other. The aggregator checks its own side first: the engine's
mask must be the mask of the plan's slice, and a plan without a slice has no
evidence step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from secure_fed.errors import AuthorityRequestMalformed, ScoringInvalid
from secure_fed.secure.ckks_claims import check_claim, claim_plan_fields
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import plan_fields
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.evidence import EvidenceSlice
from tests.secure_fed.secure.helpers import population

DIGEST = "ab" * 32
PIECE = EvidenceSlice(rows=(0, 2, 4), labels=(1, 0, 2))


def _claim(**changes: Any) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "op": "evidence",
        "uploads": [["a", DIGEST]],
        "rows": list(PIECE.rows),
        "labels": list(PIECE.labels),
        "samples": 3,
        "step": "evidence",
        "roster": ["a", "b", "c"],
    }
    claim.update(changes)
    return {k: v for k, v in claim.items() if v is not None}


def test_an_evidence_claim_states_its_slice_and_rows() -> None:
    claim = check_claim(_claim(), purpose="score", ids=["a"])
    assert claim_plan_fields(claim) == {"evidence": PIECE, "samples": 3}
    fields = plan_fields(claim)  # what the key authority puts in the release request
    assert fields["evidence"] == PIECE and fields["samples"] == 3
    assert fields["step"] == "evidence" and fields["roster"] == ("a", "b", "c")
    assert "centre" not in fields and "whitening" not in fields
    assert claim_plan_fields({"op": "score"}) == {}


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"rows": None}, "integer 'rows' and 'labels'"),
        ({"rows": None, "labels": None}, "lists its 'samples' rows and labels"),
        ({"samples": 2}, "lists its 'samples' rows and labels"),
        ({"samples": None}, "'samples' must be an integer"),
        ({"labels": [1, 0]}, "evidence slice refused"),
        ({"labels": ["1", 0, 2]}, "integer 'rows' and 'labels'"),
        ({"centre": [["a", DIGEST]]}, "no centre and no whitening"),
        ({"whitening": [[1.0]]}, "no centre and no whitening"),
        ({"center_sm3": DIGEST}, "no centre and no whitening"),
    ],
)
def test_a_malformed_evidence_claim_is_refused(changes: dict[str, Any], fragment: str) -> None:
    with pytest.raises(AuthorityRequestMalformed, match=fragment):
        check_claim(_claim(**changes), purpose="score", ids=["a"])


def test_an_evidence_claim_serves_only_a_score() -> None:
    with pytest.raises(AuthorityRequestMalformed, match="cannot serve purpose 'aggregate'"):
        check_claim(_claim(), purpose="aggregate", ids=["a"])


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_the_aggregator_asks_only_for_the_mask_of_its_plans_slice(
    mode: str, tmp_path: Path
) -> None:
    n, c, ids = 64, 3, ["a", "b", "c"]
    dep = SecureDeployment.create(mode=mode, shape=(n, c), participant_ids=ids, min_participants=3)
    agg = dep.aggregator(bound=8.0)
    handles = {
        p: agg.load(dep.encoder(p, bound=8.0).encode(m))
        for p, m in zip(ids, population(3, n, c, seed=1).values(), strict=True)
    }
    piece = EvidenceSlice(rows=tuple(range(n)), labels=(0,) * n)
    with pytest.raises(ScoringInvalid, match="has no labeled slice"):  # the default plan
        agg.evidence(handles, piece.mask((n, c)), round_id=1)
    plan = ReleasePlan.for_round(
        round_id=2, min_participants=3, shape=(n, c), scoring=agg.scoring, evidence=piece
    )
    agg.begin_round(plan)
    other = np.zeros((n, c))
    other[5, 1] = 1.0  # one row: the mask of another slice
    with pytest.raises(ScoringInvalid, match="not the mask of the plan's labeled slice"):
        agg.evidence(handles, other, round_id=2)
