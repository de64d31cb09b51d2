"""A round over loaded key directories, driven by the secure-mode test harness."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from secure_fed.deploy.keys import AggregatorKeys, ParticipantKeys, load_participant
from secure_fed.federation.messages import decode_publication
from secure_fed.secure.audit import MemoryAuditSink
from tests.secure_fed.secure.helpers import BOUND, Harness, population


class LoadedDeployment:
    """The loaded parties seen through the interface the test harness drives."""

    def __init__(self, agg: AggregatorKeys, parts: dict[str, ParticipantKeys]) -> None:
        self.agg, self.parts = agg, parts
        self.mode, self.params, self.shape = agg.mode, agg.params, agg.shape

    def aggregator(self, *, bound: float):  # type: ignore[no-untyped-def]
        return self.agg.aggregator(bound=bound)

    def encoder(self, pid: str, *, bound: float):  # type: ignore[no-untyped-def]
        return self.parts[pid].encoder(bound=bound)


def run_round(
    agg: AggregatorKeys,
    root: Path,
    tmp_path: Path,
    *,
    round_id: int = 1,
    copy: tuple[str, str] | None = None,
) -> MemoryAuditSink:
    """Run one scored round and check the publication is the weighted mean of the uploads.

    With ``copy = (a, b)`` participant ``a`` uploads ``b``'s matrix. Returns the
    engine's audit sink (its ``outlier.decision`` events carry the copies counts).
    """
    ids = agg.participant_ids
    parts = {p: load_participant(root / "participants" / p) for p in ids}
    audit = MemoryAuditSink()
    harness = Harness(
        LoadedDeployment(agg, parts), tmp_path, ids=ids, min_participants=2, audit=audit
    )
    # the participants sign with the ceremony's keys (a verifier checks them by its manifest)
    harness.keys = {p: parts[p].signing_key for p in ids}
    harness.verifier.keys = {p: k.public_key for p, k in harness.keys.items()}
    # the envelope gate forwards each accepted upload, as signed, to the verifier (ckks)
    harness.verifier.forward = harness.engine.aggregator.forward_upload
    preds = dict(zip(ids, population(len(ids), *agg.shape, seed=round_id).values(), strict=True))
    if copy is not None:
        preds[copy[0]] = preds[copy[1]].copy()
    _, _, raw = harness.round(round_id, preds)
    publication = decode_publication(raw, max_bytes=1 << 24, shape=agg.shape)
    # a copy pair of three can leave the third alone as the outlier (excluded, weight 0)
    assert set(publication.weights) == set(ids) or copy is not None, publication.weights
    expected = sum(w * np.clip(preds[p], -BOUND, BOUND) for p, w in publication.weights.items())
    np.testing.assert_allclose(publication.aggregate, expected, atol=0.01)
    return audit


def copies_counts(audit: MemoryAuditSink) -> dict[str, object]:
    """The copies count each ``outlier.decision`` event applied, by participant."""
    return {str(e["participant_id"]): e["copies"] for e in audit.named("outlier.decision")}
