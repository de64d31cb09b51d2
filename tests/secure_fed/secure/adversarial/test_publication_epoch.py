"""The publication epoch: the published sum is decrypted only under its own, strongly flooded key.

A ``ckks`` deployment (by default) holds two key epochs: ``CKKS_SCORING`` for the
scores and second moments, ``CKKS_PUBLICATION`` (flooded at ``s >= 40`` bits for
its sized count) for the published weighted sum. The attacker is the aggregator
with its own signing key: it asks for the publication under the scoring epoch
(whose flooding is far weaker), for scores under the publication epoch, sends a
forged publication ciphertext under an honest claim (caught by the recomputation)
and uploads malformed or oversized publication ciphertexts (refused with a typed
error before any use).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crypto.ckks import CKKS_PUBLICATION, generate_keys, pack_class_major
from crypto.ckks.aggregate import weighted_sum
from crypto.sm import SM2PublicKey
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    PublicationInconsistent,
    UploadMalformed,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.ckks_claims import evaluate
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes.ckks_upload import encode_upload, epoch_part, split_upload
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.publication_check import witness_field
from secure_fed.secure.recompute import SignedRequestEvidence, recompute_requests
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from tests.secure_fed.secure.helpers import BOUND, population, publication_only
from tests.tolerances import aggregate_tolerance

N, C = 300, 4
IDS = ["a", "b", "c", "d"]


def _deploy() -> tuple[Any, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,
    )
    return dep, sink


def _round(dep: Any, round_id: int, *, scored: bool) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Fix the round's plan and load every upload; return (aggregator, handles, data)."""
    agg = dep.aggregator(bound=BOUND)
    agg.begin_round(
        ReleasePlan.for_round(
            round_id=round_id,
            min_participants=3,
            shape=(N, C),
            scoring=ScoringConfig(moment_samples=agg.samples),
            scored=scored,
        )
    )
    preds = dict(zip(IDS, population(4, N, C, seed=round_id).values(), strict=True))
    payloads = {p: dep.encoder(p, bound=BOUND).encode(m) for p, m in preds.items()}
    return agg, {p: agg.load(b) for p, b in payloads.items()}, {"preds": preds, "raw": payloads}


def _signed(
    dep: Any, round_id: int, purpose: str, claim: dict[str, Any], ct: Any, **kw: Any
) -> bytes:
    return decryption_request(
        round_id=round_id,
        purpose=purpose,
        participant_ids=[u[0] for u in claim["uploads"]],
        shape=(N, C) if purpose != "score" else (kw.pop("rows"), C),
        ciphertext=ct.to_bytes(),
        signer=dep.server_keys().signer,
        claim=claim,
        **kw,
    )


def _with_witness(
    dep: Any, round_id: int, claim: dict[str, Any], publication: Any, witness: Any, **kw: Any
) -> bytes:
    """A publication request carrying ``witness`` as the aggregator's reveal sends it."""
    pub, wit = publication.to_bytes(), witness.to_bytes()
    return decryption_request(
        round_id=round_id,
        purpose="aggregate",
        participant_ids=[u[0] for u in claim["uploads"]],
        shape=(N, C),
        ciphertext=pub + wit,
        signer=dep.server_keys().signer,
        claim=claim,
        witness=witness_field(pub, wit),
        **kw,
    )


def test_a_ckks_round_publishes_from_the_publication_epoch() -> None:
    dep, sink = _deploy()
    ka = dep.authority
    assert ka.publication_keys is not None and ka.publication_keys.preset is CKKS_PUBLICATION
    agg, handles, data = _round(dep, 1, scored=True)
    agg.score(handles, round_id=1)
    scoring_after_filter = ka.keys.releases
    assert scoring_after_filter > 0 and ka.publication_keys.releases == 0
    aggregate = agg.weighted_sum(handles, dict.fromkeys(IDS, 0.25))
    out = agg.reveal(aggregate, round_id=1)
    # the publication moved the publication epoch's counter by its ciphertexts, the scoring
    # epoch's by its witness's (decrypted to be compared, never released, counted all the same)
    assert aggregate.witness is not None
    assert ka.keys.releases == scoring_after_filter + len(aggregate.witness.vectors)
    assert ka.publication_keys.releases == len(aggregate.matrix.vectors) >= 1
    assert aggregate.matrix.preset is CKKS_PUBLICATION
    expected = np.mean([data["preds"][p] for p in IDS], axis=0)
    assert np.abs(out - expected).max() <= aggregate_tolerance(CKKS_PUBLICATION, values=out.size)
    requests = sink.named("decryption.requested")
    epochs = {e["purpose"]: e["epoch"] for e in requests}
    assert epochs["aggregate"] == ka.publication_fingerprint.hex()
    assert epochs["score"] == epochs["moments"] == ka.fingerprint.hex()
    roles = [e.get("role") for e in sink.named("key.generated") if e["kind"] == "ckks"]
    assert roles == [None, "publication"]


def test_the_publication_is_refused_under_the_scoring_epoch() -> None:
    dep, sink = _deploy()
    ka = dep.authority
    agg, handles, _ = _round(dep, 2, scored=False)
    honest = agg.weighted_sum(handles, dict.fromkeys(IDS, 0.25))
    claim = honest.claim
    scoring_cts = {p: h.matrix for p, h in handles.items()}
    weak = evaluate(claim, scoring_cts, dep.public_context)  # the same sum, scoring epoch
    for epoch in ({}, {"epoch": ka.fingerprint.hex()}):  # unnamed is the scoring epoch
        with pytest.raises(DecryptionRefused, match="only under the publication epoch"):
            ka.handle(_signed(dep, 2, "aggregate", claim, weak, **epoch))
    # the publication ciphertext itself, named as the scoring epoch: refused, not parsed
    with pytest.raises(DecryptionRefused, match="only under the publication epoch"):
        ka.handle(_signed(dep, 2, "aggregate", claim, honest.matrix, epoch=ka.fingerprint.hex()))
    assert ka.keys.releases == 0 and ka.publication_keys.releases == 0
    assert len(sink.named("access.denied")) >= 3
    assert not sink.named("decryption.released")
    # the plan's publication is still there for the honest request
    agg.reveal(honest, round_id=2)
    assert ka.publication_keys.releases == len(honest.matrix.vectors)


def test_a_score_is_refused_under_the_publication_epoch() -> None:
    dep, sink = _deploy()
    ka = dep.authority
    agg, handles, _ = _round(dep, 3, scored=True)
    backend = agg.scoring_round(handles, round_id=3)
    rows = backend.samples
    claim = backend._claim(
        "score",
        ["a"],
        centre=[[p, backend.digests[p]] for p in IDS],
        samples=rows,
        whitening=np.eye(C).tolist(),
        step="ranking",
        roster=IDS,
    )
    score_ct = evaluate(claim, backend.uploads, backend.public)
    pub = {"epoch": ka.publication_fingerprint.hex()}
    with pytest.raises(DecryptionRefused, match="only under the scoring epoch"):
        ka.handle(_signed(dep, 3, "score", claim, score_ct, rows=rows, **pub))
    with pytest.raises(AuthorityRequestMalformed, match="no key epoch"):
        ka.handle(_signed(dep, 3, "score", claim, score_ct, rows=rows, epoch="ab" * 32))
    assert ka.keys.releases == 0 and ka.publication_keys.releases == 0
    # the honest ranking pass still runs, under the scoring epoch
    scores = backend.ranking_scores(IDS, rows)
    assert set(scores) == set(IDS) and ka.keys.releases == len(IDS)
    assert ka.publication_keys.releases == 0


def test_recompute_catches_a_forged_publication_ciphertext() -> None:
    dep, sink = _deploy()
    ka = dep.authority
    agg, handles, data = _round(dep, 4, scored=False)
    honest = agg.weighted_sum(handles, dict.fromkeys(IDS, 0.25))
    agg.reveal(honest, round_id=4)
    # a second round: the claim says equal weights, the ciphertext is mostly "a"'s upload
    agg5, handles5, data5 = _round(dep, 5, scored=False)
    honest5 = agg5.weighted_sum(handles5, dict.fromkeys(IDS, 0.25))
    claim, skew = honest5.claim, [0.97, 0.01, 0.01, 0.01]
    forged = weighted_sum([h.publication for h in handles5.values()], skew)
    pub = {"epoch": ka.publication_fingerprint.hex()}
    # with the honest witness the forgery is refused before anything is released ...
    assert honest5.witness is not None
    with pytest.raises(PublicationInconsistent, match="not the weighted sum of the scored"):
        ka.handle(_with_witness(dep, 5, claim, forged, honest5.witness, **pub))
    assert not [e for e in sink.named("decryption.released") if e["round_id"] == 5]
    # ... and the publication is spent: no second try in that round
    with pytest.raises(DecryptionRefused):
        ka.handle(_with_witness(dep, 5, claim, honest5.matrix, honest5.witness, **pub))
    # a witness forged the same way passes the comparison (the aggregator forges both):
    # the recomputation names it afterwards
    agg6, handles6, data6 = _round(dep, 6, scored=False)
    claim6 = agg6.weighted_sum(handles6, dict.fromkeys(IDS, 0.25)).claim
    forged6 = weighted_sum([h.publication for h in handles6.values()], skew)
    witness6 = weighted_sum([h.matrix for h in handles6.values()], skew)
    ka.handle(_with_witness(dep, 6, claim6, forged6, witness6, **pub))
    requests = [
        SignedRequestEvidence.from_event(e)
        for e in sink.named("decryption.requested")
        if e.get("epoch") == ka.publication_fingerprint.hex()
    ]
    assert [r.round_id for r in requests] == [4, 5, 5, 6]
    findings = recompute_requests(
        [r for r in requests if r.round_id != 5],
        uploads={4: data["raw"], 6: data6["raw"]},
        public=dep.publication_context,
        aggregator=SM2PublicKey.from_der(dep.server_keys().signer.identity.public_key.to_der()),
        shape=(N, C),
    )
    assert [(f.round_id, f.purpose) for f in findings] == [(6, "aggregate")]
    assert "not the one its claim recomputes to" in findings[0].problem


def test_malformed_or_oversized_publication_ciphertexts_are_refused() -> None:
    dep, _ = _deploy()
    agg = dep.aggregator(bound=BOUND)
    preds = population(1, N, C, seed=6)["p00"]
    good = dep.encoder("a", bound=BOUND).encode(preds)
    scoring, publication = split_upload(good, dep.public_context, dep.publication_context)
    ctx, pctx = dep.public_context, dep.publication_context
    wrong_shape = pack_class_major(pctx, np.zeros((N - 1, C))).to_bytes()
    cases = {
        "raw scoring ciphertexts only": (scoring, "publication epoch"),
        "truncated": (encode_upload(scoring, publication[:-9], ctx, pctx), "publication epoch"),
        "oversized": (
            encode_upload(scoring, publication + b"\0" * (4 << 20), ctx, pctx),
            "publication epoch",
        ),
        "another shape": (encode_upload(scoring, wrong_shape, ctx, pctx), "publication epoch"),
        "scoring epoch as publication": (encode_upload(scoring, scoring, ctx, ctx), "publication"),
        "parts swapped": (encode_upload(publication, scoring, pctx, ctx), "scoring"),
        "lengths": (good[:-1], "ckks_upload|add up|payload"),
    }
    for name, (payload, fragment) in cases.items():
        with pytest.raises(UploadMalformed, match=fragment):
            agg.load(payload)
        assert name
    assert agg.load(good).publication is not None  # the untouched upload still loads
    # the auditor's view: each epoch's part, and none for a foreign epoch
    assert epoch_part(good, pctx) == publication and epoch_part(good, ctx) == scoring
    with pytest.raises(UploadMalformed, match="no ciphertexts under this key epoch"):
        epoch_part(good, generate_keys("CKKS_AGGREGATION").public_context)
