"""A cheating CKKS aggregator is caught after the fact by recomputation from the stored uploads.

With one key holder the key authority cannot see what a ciphertext contains, so a
forged "score" (an upload times a one-hot mask, slot-summed) sent under an
honest-looking claim would be decrypted if the release plan allows a score of that
participant. The aggregator signed the request (claim + SM3 of the ciphertext);
recomputing the claim from the stored uploads flags it, naming round, purpose and
request digest, and the signature attributes it to the aggregator.

The deployment here has no verifier (built without envelope keys, as a deployment may
be): with one, the key authority refuses these forgeries before decrypting them
(``test_verified_release.py``); the recomputation stays the check of such a deployment
and the after-the-fact audit of every other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from crypto.ckks import EncryptedMatrix, pack_class_major
from crypto.sm import sm3_digest
from privacy_ledger.audit import canonical
from secure_fed.errors import KeyEpochExhausted
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.ckks_claims import evaluate
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.recompute import Finding, SignedRequestEvidence, recompute_requests
from secure_fed.wire import KEY_AUTHORITY_REQUEST, decode_frame, encode_header
from tests.secure_fed.secure.helpers import population

N, C = 64, 4
IDS = ["a", "b", "c", "d"]
ROUND = 7


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(  # one epoch: raw scoring-epoch payloads (publication epoch:
        mode="ckks",  # tests/secure_fed/secure/adversarial/test_publication_epoch.py)
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        audit=sink,
        publication_preset=None,
    )
    assert dep.authority.verifier is None  # type: ignore[attr-defined]  # detected afterwards
    preds = dict(zip(IDS, population(4, N, C, seed=9).values(), strict=True))
    payloads = {p: pack_class_major(dep.public_context, m).to_bytes() for p, m in preds.items()}
    agg = dep.aggregator(bound=8.0)
    ups = {p: agg.load(b).matrix for p, b in payloads.items()}  # type: ignore[attr-defined]
    return dep, sink, payloads, ups


def _claim(payloads: dict[str, bytes], op: str, ids: list[str], **params: Any) -> dict[str, Any]:
    return {"op": op, "uploads": [[p, sm3_digest(payloads[p]).hex()] for p in ids], **params}


def _signed(dep, purpose, ids, matrix, claim) -> SignedRequestEvidence:  # type: ignore[no-untyped-def]
    """What the key authority logs of a request the aggregator signed."""
    request = decryption_request(
        round_id=ROUND,
        purpose=purpose,
        participant_ids=ids,
        shape=(N, C),
        ciphertext=matrix.to_bytes(),
        signer=dep.server_keys().signer,
        claim=claim,
    )
    header, payload = decode_frame(request, KEY_AUTHORITY_REQUEST)
    signature = bytes.fromhex(str(header.pop("signature")))
    signed = encode_header(KEY_AUTHORITY_REQUEST, header)
    return SignedRequestEvidence(
        round_id=ROUND,
        purpose=purpose,
        request_sm3=sm3_digest(signed).hex(),
        signed_header=signed,
        signature=signature,
        ciphertext_sm3=sm3_digest(payload).hex(),
    )


def _recompute(
    dep: Any, payloads: dict[str, bytes], evidence: list[SignedRequestEvidence]
) -> list[Finding]:
    return recompute_requests(
        evidence,
        uploads={ROUND: payloads},
        public=dep.public_context,
        aggregator=dep.server_keys().signer.identity.public_key,
        shape=(N, C),
    )


def _one_hot_score(upload: EncryptedMatrix, cell: tuple[int, int]) -> EncryptedMatrix:
    """The attack: the chosen cell of one upload, slot-summed, at the level of a score."""
    row, cls = cell
    mask = [0.0] * upload.layout.run(0)[1]
    mask[row] = 1.0
    vector = upload.vectors[upload.layout.index(cls, 0)] * mask
    vector = (vector * 1.0).sum()  # second rescale: the level of an honest score
    return EncryptedMatrix(
        kind="score",
        preset=upload.preset,
        fingerprint=upload.fingerprint,
        layout=upload.layout,
        vectors=[vector],
    )


def _centre(payloads: dict[str, bytes], ids: list[str]) -> list[list[str]]:
    return [[p, sm3_digest(payloads[p]).hex()] for p in ids]


def test_honest_requests_recompute_and_a_forged_score_is_flagged(setup) -> None:  # type: ignore[no-untyped-def]
    dep, _, payloads, ups = setup
    eye = np.eye(C).tolist()
    centre = _centre(payloads, IDS)  # the hidden mean of the pass, as the aggregator claims it
    common = {"centre": centre, "samples": N, "whitening": eye, "step": "final", "roster": IDS}
    honest = _claim(payloads, "score", ["a"], **common)
    forged = _claim(payloads, "score", ["b"], **common)
    moments = _claim(payloads, "moments", IDS[:3], centre=centre[:3], samples=N)
    agg = _claim(payloads, "weighted_sum", IDS, weights=[0.25] * 4)
    public = dep.public_context
    evidence = [
        _signed(dep, "score", ["a"], evaluate(honest, ups, public), honest),
        _signed(dep, "moments", IDS[:3], evaluate(moments, ups, public), moments),
        _signed(dep, "aggregate", IDS, evaluate(agg, ups, public), agg),
        _signed(dep, "score", ["b"], _one_hot_score(ups["b"], (5, 2)), forged),
    ]
    findings = _recompute(dep, payloads, evidence)
    assert [(f.round_id, f.purpose, f.request_sm3) for f in findings] == [
        (ROUND, "score", evidence[3].request_sm3)
    ]
    assert "not the one its claim recomputes to" in findings[0].problem


def test_a_centre_naming_a_substituted_upload_is_flagged(setup) -> None:  # type: ignore[no-untyped-def]
    """The centre's members are checked against the stored uploads like the operands."""
    dep, _, payloads, ups = setup
    eye = np.eye(C).tolist()
    common = {"samples": N, "whitening": eye, "step": "final", "roster": IDS}
    honest = _claim(payloads, "score", ["a"], centre=_centre(payloads, IDS), **common)
    centre = _centre(payloads, IDS)
    centre[3] = ["d", sm3_digest(payloads["d"] + b"x").hex()]  # not an operand: only the centre
    claim = _claim(payloads, "score", ["a"], centre=centre, **common)
    matrix = evaluate(honest, ups, dep.public_context)
    findings = _recompute(dep, payloads, [_signed(dep, "score", ["a"], matrix, claim)])
    assert len(findings) == 1 and "upload of 'd'" in findings[0].problem


def test_an_upload_relabelled_as_an_aggregate_over_invented_ids_is_caught(setup) -> None:  # type: ignore[no-untyped-def]
    dep, _, payloads, ups = setup
    up = ups["a"]
    fake = EncryptedMatrix(
        kind="aggregate",
        preset=up.preset,
        fingerprint=up.fingerprint,
        layout=up.layout,
        vectors=[v * 1.0 for v in up.vectors],  # one rescale: the level of an aggregate
        contributors=3,
    )
    claim = {
        "op": "weighted_sum",
        "uploads": [
            ["a", sm3_digest(payloads["a"]).hex()],
            ["ghost-1", "1" * 64],
            ["ghost-2", "2" * 64],
        ],
        "weights": [0.5, 0.25, 0.25],
    }
    evidence = [_signed(dep, "aggregate", ["a", "ghost-1", "ghost-2"], fake, claim)]
    findings = _recompute(dep, payloads, evidence)
    assert len(findings) == 1 and "'ghost-1'" in findings[0].problem


def test_a_tampered_log_or_signature_is_flagged(setup) -> None:  # type: ignore[no-untyped-def]
    dep, _, payloads, ups = setup
    claim = _claim(payloads, "weighted_sum", IDS, weights=[0.25] * 4)
    good = _signed(dep, "aggregate", IDS, evaluate(claim, ups, dep.public_context), claim)
    header = canonical.decode(good.signed_header)
    header["claim"]["weights"] = ["0.7", "0.1", "0.1", "0.1"]
    altered = canonical.encode(header)
    forged = SignedRequestEvidence(
        round_id=ROUND,
        purpose="aggregate",
        request_sm3=sm3_digest(altered).hex(),
        signed_header=altered,
        signature=good.signature,
        ciphertext_sm3=good.ciphertext_sm3,
    )
    findings = _recompute(dep, payloads, [good, forged])
    assert [f.problem for f in findings] == ["the aggregator's signature does not verify"]


def test_release_counter_exhaustion_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    dep, sink, payloads, ups = setup
    claim = _claim(payloads, "weighted_sum", IDS, weights=[0.25] * 4)
    matrix = evaluate(claim, ups, dep.public_context)
    authority = dep.authority
    assert authority.keys is not None
    authority.max_releases = authority.keys.releases
    request = decryption_request(
        round_id=ROUND,
        purpose="aggregate",
        participant_ids=IDS,
        shape=(N, C),
        ciphertext=matrix.to_bytes(),
        signer=dep.server_keys().signer,
        claim=claim,
    )
    with pytest.raises(KeyEpochExhausted, match="rotate the keys"):
        authority.handle(request)
    assert sink.named("access.denied")[-1]["code"] == "KEY_AUTHORITY_EPOCH_EXHAUSTED"
    assert not authority.requests[-1].granted


def test_an_evidence_claim_recomputes_and_one_outside_the_uploads_is_a_finding(setup) -> None:  # type: ignore[no-untyped-def]
    """The mask is rebuilt from the slice the signed claim lists (rows and labels)."""
    dep, _, payloads, ups = setup
    rows = list(range(0, N, 2))
    claim = _claim(
        payloads, "evidence", ["a"], rows=rows, labels=[r % C for r in rows], samples=len(rows)
    )
    honest = evaluate(claim, ups, dep.public_context)
    outside = {**claim, "rows": [*rows[:-1], N]}  # a row past the public set
    evidence = [
        _signed(dep, "score", ["a"], honest, claim),
        _signed(dep, "score", ["a"], honest, outside),
    ]
    findings = _recompute(dep, payloads, evidence)
    assert [f.request_sm3 for f in findings] == [evidence[1].request_sm3]
    assert "does not evaluate on the stored uploads" in findings[0].problem
