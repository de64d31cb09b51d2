"""Verified release: the key authority decrypts only what the verifier recomputed and attested.

The attacker is the ckks aggregator with its own signing key. Every upload reaches the
verifier as its participant signed it (the engine's envelope gate forwards it); the
aggregator's channel to the key authority is replaced by a forging one that, for one
targeted request, sends another ciphertext under the honest claim, re-signed: (a) one
participant's upload as the round's publication over the real ids, (b) ``C(C+1)/2``
chosen cells of one participant as the round's covariance, (c) one cell as a final
score, (d) a round-2 publication computed from round-1 uploads. Each was decrypted and
released before, and named only afterwards by the recomputation
(``tests/api/cli/test_ledger_recompute.py``, ``test_ckks_accountability.py``).

Here the verifier refuses to attest the forgery, and the key authority refuses it before
decrypting anything (``KEY_AUTHORITY_RELEASE_UNATTESTED``, an ``access.denied`` event
naming the request), whether it carries no attestation or the honest request's.
Switching the key authority's check off (``dep.authority.verifier = None`` in
:func:`_deploy`, as a deployment without a verifier is built) makes every forgery test
fail: the forged value is released.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto.ckks import EncryptedMatrix, Layout, load_encrypted, weighted_sum
from crypto.sm import sm3_digest
from privacy_ledger.audit import canonical
from secure_fed.errors import AttestationRefused, ReleaseUnattested, VerifierUploadRefused
from secure_fed.federation.envelope import EnvelopeVerifier
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.ckks_claims import evaluate
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.inprocess.ckks import CkksDeployment
from secure_fed.secure.modes.ckks import CkksAggregator
from secure_fed.secure.modes.ckks_upload import epoch_part
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.protocol.attestation import Attested, sign_attestation
from secure_fed.secure.publication_check import witness_field
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import KEY_AUTHORITY_REQUEST, decode_frame
from tests.secure_fed.secure.helpers import BOUND, Harness, population

N, C = 64, 4
IDS = ["a", "b", "c", "d"]
UNATTESTED = ReleaseUnattested.code

Forger = Callable[[dict[str, Any], Any], tuple[bytes, bytes | None] | None]


class Attack:
    """The forging aggregator's channel: honest requests pass, the targeted one is swapped."""

    def __init__(self, dep: CkksDeployment, forge: Forger) -> None:
        self.dep, self.forge = dep, forge
        self.payloads: dict[int, dict[str, bytes]] = {}
        self.forged: list[bytes] = []
        self.verifier_refusals: list[AttestationRefused] = []
        self.releases_before = -1

    def __call__(self, request: bytes, attestation: bytes | None = None) -> bytes:
        decoded, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        header: dict[str, Any] = dict(decoded)
        swap = self.forge(header, self.payloads)
        if swap is None:
            return self.dep.authority.handle(request, attestation)
        ciphertext, witness = swap
        extra: dict[str, Any] = {"epoch": header["epoch"]} if "epoch" in header else {}
        if witness is not None:
            extra["witness"] = witness_field(ciphertext, witness)
            ciphertext += witness
        for name in ("bound", "max_weight"):
            if name in header:
                extra[name] = header[name]
        forged = decryption_request(
            round_id=int(str(header["round_id"])),
            purpose=str(header["purpose"]),
            participant_ids=list(header["participant_ids"]),
            shape=tuple(header["shape"]),
            ciphertext=ciphertext,
            signer=self.dep.server_keys().signer,
            claim=header["claim"],
            **extra,
        )
        self.forged.append(forged)
        assert self.dep.verifier is not None
        try:  # the aggregator asks the verifier to attest its forgery: refused
            attestation = self.dep.verifier.attest(forged)
        except AttestationRefused as exc:
            self.verifier_refusals.append(exc)
        # ... and sends it with the honest request's attestation (or none)
        self.releases_before = _releases(self.dep)
        return self.dep.authority.handle(forged, attestation)


def _deploy(
    tmp_path: Path, forge: Forger
) -> tuple[CkksDeployment, Harness, Attack, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="ckks",
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        audit=sink,
        verified_release=True,
    )
    assert isinstance(dep, CkksDeployment) and dep.verifier is not None
    assert dep.authority.verifier == dep.verifier.identity
    harness = Harness(dep, tmp_path, ids=IDS, min_participants=3, audit=sink)
    attack = Attack(dep, forge)
    keys = replace(dep.server_keys(), authority=attack)
    aggregator = CkksAggregator(
        shape=(N, C), bound=BOUND, keys=keys, scoring=dep.plan.scoring, min_participants=3
    )
    harness.engine.aggregator = aggregator
    harness.verifier.forward = aggregator.forward_upload  # the gate forwards what it accepted
    # the verifier checks forwarded envelopes with its own gate over the enrolled keys
    own = EnvelopeVerifier(
        keys={p: k.public_key for p, k in harness.keys.items()},
        submit=harness.engine.submit,
        params=dep.params,
        max_bytes=32 << 20,
    )
    assert dep.link_upload_verifier(own.open)
    return dep, harness, attack, sink


def _preds(seed: int) -> dict[str, np.ndarray]:
    return dict(zip(IDS, population(4, N, C, seed=seed).values(), strict=True))


def _held(dep: CkksDeployment, round_id: int, pid: str) -> bytes:
    assert dep.verifier is not None
    return dep.verifier._uploads[round_id][pid]


def _upload(dep: CkksDeployment, payload: bytes, *, publication: bool) -> EncryptedMatrix:
    public = dep.publication_context if publication else dep.public_context
    assert public is not None
    part = epoch_part(payload, public)
    return load_encrypted(public, part, kind="upload", n_samples=N, n_classes=C)


def _cell(up: EncryptedMatrix, row: int, cls: int, *, rescales: int) -> Any:
    """One cell of an upload, slot-summed, at the level of ``rescales`` multiplications."""
    mask = [0.0] * up.layout.run(0)[1]
    mask[row] = 1.0
    vector = up.vectors[up.layout.index(cls, 0)] * mask
    for _ in range(rescales - 1):
        vector = vector * 1.0
    return vector.sum()


def _assert_refused_before_release(
    dep: CkksDeployment, attack: Attack, sink: MemoryAuditSink, purpose: str
) -> None:
    """Nothing of the forged request was decrypted; refused, audited, journalled."""
    assert len(attack.forged) == 1 and len(attack.verifier_refusals) == 1
    assert "not the one its claim recomputes to" in str(attack.verifier_refusals[0])
    forged = [r for r in dep.authority.requests if r.purpose == purpose and not r.granted]
    assert len(forged) == 1 and "attestation" in str(forged[0].reason)
    denied = [e for e in sink.named("access.denied") if e.get("code") == UNATTESTED]
    assert [e["request_sm3"] for e in denied] == [forged[0].request_sm3]
    assert denied[0]["party"] == "key_authority" and denied[0]["purpose"] == purpose
    by_verifier = [e for e in sink.named("access.denied") if e.get("party") == "verifier"]
    assert [e["request_sm3"] for e in by_verifier] == [forged[0].request_sm3]
    assert _releases(dep) == attack.releases_before  # nothing of it was decrypted


def _releases(dep: CkksDeployment) -> int:
    total = dep.authority.keys.releases  # type: ignore[union-attr]
    pub = dep.authority.publication_keys
    return total + (pub.releases if pub is not None else 0)


def test_an_honest_verified_round_publishes(tmp_path: Path) -> None:
    dep, harness, attack, sink = _deploy(tmp_path, lambda _h, _p: None)
    preds = _preds(1)
    _, state, publication = harness.round(1, preds)
    assert publication and not attack.forged
    assert dep.verifier is not None and set(dep.verifier.held(1)) == set(IDS)
    assert dep.authority.requests and all(r.granted for r in dep.authority.requests)
    assert not [e for e in sink.named("access.denied") if e.get("code") == UNATTESTED]
    released = {e["purpose"] for e in sink.named("decryption.released")}
    assert {"aggregate", "moments", "score"} <= released


def test_a_relabelled_upload_as_the_publication_is_refused_before_release(tmp_path: Path) -> None:
    """(a) one participant's upload as the round's publication, with the real ids."""

    def forge(header: dict[str, Any], _p: dict[str, Any]) -> tuple[bytes, bytes | None] | None:
        if header["purpose"] != "aggregate":
            return None
        raw = _held(dep, 1, "a")
        pub, scoring = (_upload(dep, raw, publication=p) for p in (True, False))
        # a's upload four times at the claim's weights: a's matrix, "over four contributors"
        weights = [0.25] * 4
        return (
            weighted_sum([pub] * 4, weights).to_bytes(),
            weighted_sum([scoring] * 4, weights).to_bytes(),
        )

    dep, harness, attack, sink = _deploy(tmp_path, forge)
    with pytest.raises(ReleaseUnattested, match="attestation"):
        harness.round(1, _preds(2))
    assert not [e for e in sink.named("decryption.released") if e["purpose"] == "aggregate"]
    assert dep.authority.publication_keys is not None
    assert dep.authority.publication_keys.releases == 0
    _assert_refused_before_release(dep, attack, sink, "aggregate")
    # the refused publication is spent: no second attempt in the round (no retry oracle)
    tracker = dep.authority.plans.tracker(1)
    assert tracker is not None and tracker.phase == "done"


def test_chosen_cells_as_the_covariance_are_refused_before_release(tmp_path: Path) -> None:
    """(b) the round's one moments request carrying C(C+1)/2 chosen cells of one upload."""

    def forge(header: dict[str, Any], _p: dict[str, Any]) -> tuple[bytes, bytes | None] | None:
        if header["purpose"] != "moments":
            return None
        up = _upload(dep, _held(dep, 1, "a"), publication=False)
        pairs = C * (C + 1) // 2
        cells = [_cell(up, row, row % C, rescales=1) for row in range(pairs)]
        forged = EncryptedMatrix(
            kind="aggregate",
            preset=up.preset,
            fingerprint=up.fingerprint,
            layout=Layout(n_samples=1, n_classes=pairs, slots=up.layout.slots),
            vectors=cells,
            contributors=len(header["participant_ids"]),
        )
        return forged.to_bytes(), None

    dep, harness, attack, sink = _deploy(tmp_path, forge)
    with pytest.raises(ReleaseUnattested, match="attestation"):
        harness.round(1, _preds(3))
    assert not [e for e in sink.named("decryption.released") if e["purpose"] == "moments"]
    _assert_refused_before_release(dep, attack, sink, "moments")


def test_one_cell_as_a_final_score_is_refused_before_release(tmp_path: Path) -> None:
    """(c) a "final score" that is one cell of that participant's upload."""

    def forge(header: dict[str, Any], _p: dict[str, Any]) -> tuple[bytes, bytes | None] | None:
        claim = header["claim"]
        if claim.get("step") != "final" or claim["uploads"][0][0] != "b":
            return None
        up = _upload(dep, _held(dep, 1, "b"), publication=False)
        forged = EncryptedMatrix(
            kind="score",
            preset=up.preset,
            fingerprint=up.fingerprint,
            layout=Layout(n_samples=N, n_classes=C, slots=up.layout.slots),
            vectors=[_cell(up, 5, 0, rescales=2)],
        )
        return forged.to_bytes(), None

    dep, harness, attack, sink = _deploy(tmp_path, forge)
    with pytest.raises(ReleaseUnattested, match="attestation"):
        harness.round(1, _preds(4))
    finals: list[Any] = [e for e in sink.named("decryption.released") if e.get("step") == "final"]
    assert "b" not in {p for e in finals for p in e.get("participant_ids", [])}
    _assert_refused_before_release(dep, attack, sink, "score")


def test_a_round_two_publication_from_round_one_uploads_is_refused(tmp_path: Path) -> None:
    """(d) round 2's publication computed from round 1's uploads, under round 2's claim."""

    def forge(header: dict[str, Any], _p: dict[str, Any]) -> tuple[bytes, bytes | None] | None:
        if header["purpose"] != "aggregate" or header["round_id"] != 2:
            return None
        old = [_held(dep, 1, p) for p in IDS]
        weights = [0.25] * 4
        pub = [_upload(dep, raw, publication=True) for raw in old]
        scoring = [_upload(dep, raw, publication=False) for raw in old]
        return weighted_sum(pub, weights).to_bytes(), weighted_sum(scoring, weights).to_bytes()

    dep, harness, attack, sink = _deploy(tmp_path, forge)
    harness.round(1, _preds(5))
    released = len(sink.named("decryption.released"))
    with pytest.raises(ReleaseUnattested, match="attestation"):
        harness.round(2, _preds(6))
    late = sink.named("decryption.released")[released:]
    assert not [e for e in late if e["purpose"] == "aggregate"]
    _assert_refused_before_release(dep, attack, sink, "aggregate")


def test_the_verifier_refuses_a_ciphertext_that_is_not_its_claim(tmp_path: Path) -> None:
    dep, harness, _attack, sink = _deploy(tmp_path, lambda _h, _p: None)
    harness.engine.open(harness.config(1))
    harness.engine.start_collecting(1)
    preds = _preds(7)
    for pid, matrix in preds.items():
        harness.verifier.accept(harness.envelope(pid, matrix, 1), round_id=1)
    handles = harness.engine._handles[1]
    agg: Any = harness.engine.aggregator
    honest = agg.weighted_sum(handles, dict.fromkeys(IDS, 0.25))
    skew = agg.weighted_sum(handles, {"a": 0.97, "b": 0.01, "c": 0.01, "d": 0.01})

    def request(aggregate: Any) -> bytes:
        pub, wit = aggregate.matrix.to_bytes(), aggregate.witness.to_bytes()
        return decryption_request(
            round_id=1,
            purpose="aggregate",
            participant_ids=IDS,
            shape=(N, C),
            ciphertext=pub + wit,
            signer=dep.server_keys().signer,
            claim=honest.claim,
            epoch=dep.authority.publication_fingerprint.hex(),
            witness=witness_field(pub, wit),
        )

    assert dep.verifier is not None
    with pytest.raises(AttestationRefused, match="not the one its claim recomputes to"):
        dep.verifier.attest(request(skew))
    assert dep.verifier.attest(request(honest))  # the honest one is attested
    # a request not signed by the enrolled aggregator is refused too
    other = CkksDeployment.deploy(replace(dep.plan, audit=None))
    with pytest.raises(AttestationRefused, match="request refused"):
        dep.verifier.attest(
            decryption_request(
                round_id=1,
                purpose="aggregate",
                participant_ids=IDS,
                shape=(N, C),
                ciphertext=honest.matrix.to_bytes(),
                signer=other.server_keys().signer,
                claim=honest.claim,
            )
        )
    assert [e["code"] for e in sink.named("access.denied") if e.get("party") == "verifier"] == [
        AttestationRefused.code
    ] * 2


def test_the_verifier_refuses_an_unsigned_or_second_upload(tmp_path: Path) -> None:
    dep, harness, _attack, sink = _deploy(tmp_path, lambda _h, _p: None)
    assert dep.verifier is not None
    first = harness.envelope("a", _preds(8)["a"], 1)
    assert dep.verifier.receive(first, 1) == "a"
    assert dep.verifier.receive(first, 1) == "a"  # the same envelope again: no change
    with pytest.raises(VerifierUploadRefused, match="another upload"):
        dep.verifier.receive(harness.envelope("a", _preds(9)["a"], 1), 1)
    tampered = first[:-1] + bytes([first[-1] ^ 1])
    with pytest.raises(VerifierUploadRefused, match="forwarded upload refused"):
        dep.verifier.receive(tampered, 1)
    with pytest.raises(VerifierUploadRefused, match="round 1, not 2"):
        dep.verifier.receive(first, 2)
    codes = [e["code"] for e in sink.named("access.denied") if e.get("party") == "verifier"]
    assert codes == [VerifierUploadRefused.code] * 3
    # it keeps the newest two rounds: a third drops the first (memory stays bounded)
    dep.verifier.receive(harness.envelope("b", _preds(8)["b"], 2), 2)
    assert dep.verifier.held(1) == {"a": sm3_digest(_held(dep, 1, "a")).hex()}
    dep.verifier.receive(harness.envelope("b", _preds(8)["b"], 3), 3)
    assert dep.verifier.held(1) == {} and set(dep.verifier.held(3)) == {"b"}


def test_the_key_authority_takes_only_its_verifiers_attestation_of_that_request(
    tmp_path: Path,
) -> None:
    """No attestation, another key's, or one of another request: refused, nothing decrypted."""
    dep, harness, _attack, sink = _deploy(tmp_path, lambda _h, _p: None)
    assert dep.verifier is not None
    harness.engine.open(harness.config(1))
    harness.engine.start_collecting(1)
    for pid, matrix in _preds(10).items():
        harness.verifier.accept(harness.envelope(pid, matrix, 1), round_id=1)
    harness.engine.close(1)
    agg: Any = harness.engine.aggregator
    backend = agg.scoring_round(harness.engine._handles[1], round_id=1)
    claim = backend._claim(
        "score",
        ["a"],
        centre=[[p, backend.digests[p]] for p in IDS],
        samples=backend.samples,
        whitening=np.eye(C).tolist(),
        step="ranking",
        roster=IDS,
    )

    def request() -> bytes:
        return decryption_request(
            round_id=1,
            purpose="score",
            participant_ids=["a"],
            shape=(backend.samples, C),
            ciphertext=evaluate(claim, backend.uploads, backend.public).to_bytes(),
            signer=dep.server_keys().signer,
            claim=claim,
            epoch=dep.public_context.fingerprint.hex(),
        )

    # each attempt is a fresh request (a refused one has spent its nonce)
    bare, foreign, other, honest = (request() for _ in range(4))
    fields: Any = canonical.decode(dep.verifier.attest(foreign))
    stranger = ServerSigningKey.generate("verifier")  # the same name, another key
    forged = sign_attestation(
        stranger,
        Attested(
            round_id=1,
            purpose="score",
            request_sm3=str(fields["request_sm3"]),
            ciphertext_sm3=str(fields["ciphertext_sm3"]),
        ),
    )
    right = dep.verifier.attest(honest)
    ka = dep.authority
    with pytest.raises(ReleaseUnattested, match="no attestation"):
        ka.handle(bare)
    with pytest.raises(ReleaseUnattested, match="signature"):
        ka.handle(foreign, forged)
    with pytest.raises(ReleaseUnattested, match="request_sm3"):
        ka.handle(other, right)  # the attestation of another request
    assert ka.keys is not None and ka.keys.releases == 0
    denied = [e for e in sink.named("access.denied") if e.get("code") == UNATTESTED]
    assert len(denied) == 3
    assert not sink.named("decryption.released")
    out = ka.handle(honest, right)  # the verifier's own attestation of this request
    assert out and ka.keys.releases == 1
