"""Nothing decrypted or opened is ever one participant's vector (docs/audit/threat-model.md)."""

from __future__ import annotations

import pytest

from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import AGGREGATE_PURPOSES
from secure_fed.secure.scoring.outlier import MemoryAuditSink
from tests.secure_fed.secure.helpers import Harness, population

N, C, K, MIN = 200, 10, 5, 3
IDS = [f"p{j:02d}" for j in range(K)]


def _check_log(log, min_participants: int) -> int:  # type: ignore[no-untyped-def]
    released = [r for r in log if r.released]
    for r in released:
        if r.purpose in AGGREGATE_PURPOSES or r.purpose == "aggregate":
            assert r.contributors >= min_participants
            assert len(set(r.participant_ids)) >= min_participants
        elif r.purpose == "distance":  # copies step: kept by the key authority / a bit in shares
            assert r.contributors == 2 and r.shape == (1,)
        else:
            assert r.purpose == "score" and r.contributors == 1
            assert r.shape == (1,)  # one scalar, never a vector
    return len(released)


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_only_aggregates_and_scalar_scores_are_revealed(mode: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode=mode, shape=(N, C), participant_ids=IDS, min_participants=MIN, audit=sink
    )
    h = Harness(dep, tmp_path, ids=IDS, min_participants=MIN, audit=sink)
    for rid in (1, 2):
        preds = population(K, N, C, seed=rid, attackers=1, attack="label_flip")
        scores, state, _ = h.round(rid, preds)
        assert state.stage.value == "published"
        assert state.excluded == ["p04"]
    log = dep.helper.log if mode == "shares" else dep.authority.log
    released = _check_log(log, MIN)
    # per round: two scores per participant, ONE covariance, ONE publication; no mean;
    # one distance (ckks) or within-threshold bit (shares) per pair of the K - 1 accepted,
    # then ONE release of their counts
    pairs = (K - 1) * (K - 2) // 2
    assert released == 2 * (2 * K + 2 + pairs)
    purposes = {"moments", "score", "aggregate", *(("distance",) if pairs else ())}
    assert {r.purpose for r in log if r.released} == purposes
    assert len(sink.named("decryption.released")) == released + (2 if pairs else 0)
    assert len(sink.named("outlier.decision")) == 2 * K
    assert not sink.named("upload.rejected")
