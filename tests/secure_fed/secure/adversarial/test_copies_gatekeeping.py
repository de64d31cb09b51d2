"""Near-duplicate detection in ckks mode: the key authority keeps the distances, counts leave.

Real deployments and real engine rounds (K = 6, signed envelopes). Three participants
upload one matrix. The aggregator computes each pair's distance under encryption (the
hidden-centre score of one upload against the other, ``W = I``) and the key authority
decrypts it only at the release plan's ``copies`` step, once per pair of the accepted
set, keeps it, and answers the last pair with one count per participant. The engine
applies ``u_k = 1 / (1 + copies_k)`` as in plaintext mode. The attacker is the
aggregator, using our own classes: it asks for a distance outside the plan, a second
time, as a score, and for a pair naming a participant outside the roster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto.ckks import EncryptedMatrix, Layout
from secure_fed.errors import AuthorityRequestMalformed, DecryptionRefused, ServerRequestReplayed
from secure_fed.federation.decisions import KeepAll
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.computation.evidence import ckks_pair_distance
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.recompute import SignedRequestEvidence, recompute_requests
from secure_fed.wire import KEY_AUTHORITY_REPLY, KEY_AUTHORITY_REQUEST, decode_array, decode_frame
from tests.secure_fed.secure.helpers import Harness, population

N, C, K = 200, 10, 6
IDS = [f"p{j:02d}" for j in range(K)]
GROUP = IDS[3:]  # p03, p04, p05 upload p03's matrix (plaintext: one entry moved by 1e-3)
PREDS = population(K, N, C, seed=4)
for _k, _pid in enumerate(GROUP[1:], start=1):  # one matrix; the bytes differ (as re-encoded)
    PREDS[_pid] = PREDS[GROUP[0]].copy()
    PREDS[_pid][0, 0] += 1e-3 * _k


class Recorder:
    """A channel that records every request (after ``swap``) and reply it passes on."""

    def __init__(
        self, inner: Callable[[bytes], bytes], swap: Callable[[bytes], bytes] | None = None
    ) -> None:
        self.inner, self.swap = inner, swap
        self.sent: list[tuple[bytes, bytes]] = []

    def __call__(self, request: bytes) -> bytes:
        request = self.swap(request) if self.swap is not None else request
        reply = self.inner(request)
        self.sent.append((request, reply))
        return reply


class Round:
    """One ckks round with the keep-all filter, driven up to the filter (or through)."""

    def __init__(
        self,
        tmp_path: Path,
        mode: str = "ckks",
        swap: Callable[[bytes], bytes] | None = None,
        **aggregator: object,
    ) -> None:
        self.sink = MemoryAuditSink()
        self.dep = SecureDeployment.create(
            mode=mode, shape=(N, C), participant_ids=IDS, min_participants=3, audit=self.sink
        )
        self.harness = Harness(self.dep, tmp_path, ids=IDS, min_participants=3, audit=self.sink)
        self.engine = self.harness.engine
        self.engine.outlier_filter = KeepAll()  # every factor 1: the weights show u_k alone
        self.agg = self.engine.aggregator
        for name, value in aggregator.items():
            setattr(self.agg, name, value)
        if mode == "ckks":
            self.channel = Recorder(self.agg.keys.authority, swap)  # type: ignore[attr-defined]
            self.agg.keys = replace(self.agg.keys, authority=self.channel)  # type: ignore[attr-defined]
        self.engine.open(self.harness.config(1))
        self.engine.start_collecting(1)
        for pid, matrix in PREDS.items():
            self.harness.verifier.accept(self.harness.envelope(pid, matrix, 1), round_id=1)
        self.engine.close(1)
        self.engine.filter(1)
        self.handles = self.engine._live_handles(self.engine.state(1))

    @property
    def authority(self) -> Any:
        return self.dep.authority  # type: ignore[attr-defined]

    def publish(self) -> tuple[dict[str, float], dict[str, int]]:
        """Publish; return the published weights and the copies the engine audited."""
        self.engine.publish(1)
        events = self.sink.named("outlier.decision")
        copies = {str(e["participant_id"]): int(e["copies"]) for e in events}  # type: ignore[call-overload]
        return dict(self.engine.state(1).weights), copies

    def distance(
        self,
        pair: tuple[str, str],
        *,
        roster: list[str] = IDS,
        purpose: str = "distance",
        ciphertext: EncryptedMatrix | None = None,
    ) -> bytes:
        """A signed distance request for ``pair``, built as the aggregator would."""
        real = [p if p in self.handles else IDS[1] for p in pair]  # mallory: p01's bytes
        claim = {
            "op": "distance",
            "uploads": [[p, self.handles[r].digest] for p, r in zip(pair, real, strict=True)],  # type: ignore[attr-defined]
            "samples": N,
            "step": "copies",
            "roster": roster,
        }
        first, second = (self.handles[r].matrix for r in real)  # type: ignore[attr-defined]
        matrix = ciphertext or ckks_pair_distance(first, second)
        return decryption_request(
            round_id=1,
            purpose=purpose,
            participant_ids=list(pair),
            shape=(N, C),
            ciphertext=matrix.to_bytes(),
            signer=self.agg.keys.signer,  # type: ignore[attr-defined]
            claim=claim,
            epoch=self.agg.keys.public_context.fingerprint.hex(),  # type: ignore[attr-defined]
        )

    def as_score(self, pid: str, centre: str, step: str) -> bytes:
        """A signed score request: ``pid`` against the hidden centre ``{centre}``, W = I."""
        digest = self.handles[pid].digest  # type: ignore[attr-defined]
        claim = {
            "op": "score",
            "uploads": [[pid, digest]],
            "centre": [[centre, self.handles[centre].digest]],  # type: ignore[attr-defined]
            "samples": N,
            "whitening": np.eye(C).tolist(),
            "step": step,
            "roster": IDS,
        }
        first, second = self.handles[pid].matrix, self.handles[centre].matrix  # type: ignore[attr-defined]
        return decryption_request(
            round_id=1,
            purpose="score",
            participant_ids=[pid],
            shape=(N, C),
            ciphertext=ckks_pair_distance(first, second).to_bytes(),
            signer=self.agg.keys.signer,  # type: ignore[attr-defined]
            claim=claim,
            epoch=self.agg.keys.public_context.fingerprint.hex(),  # type: ignore[attr-defined]
        )

    def last_denial(self) -> str:
        return str(self.sink.named("access.denied")[-1]["reason"])


def _distance_replies(run: Round) -> list[np.ndarray]:
    out = []
    for request, reply in run.channel.sent:
        header, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        if header["purpose"] == "distance":
            meta, raw = decode_frame(reply, KEY_AUTHORITY_REPLY)
            out.append(decode_array(meta["array"], raw))
    return out


def test_three_uploads_of_one_matrix_share_one_weight_as_in_plaintext(tmp_path: Path) -> None:
    run = Round(tmp_path / "ckks")
    releases = run.authority.keys.releases
    weights, copies = run.publish()
    assert copies == {**dict.fromkeys(IDS[:3], 0), **dict.fromkeys(GROUP, 2)}
    honest = [weights[p] for p in IDS[:3]]
    assert honest == pytest.approx([honest[0]] * 3)
    assert [weights[p] for p in GROUP] == pytest.approx([honest[0] / 3] * 3)
    assert sum(weights[p] for p in GROUP) == pytest.approx(honest[0])  # one weight, shared
    plain_weights, plain_copies = Round(tmp_path / "plain", mode="plaintext").publish()
    assert plain_copies == copies and plain_weights == pytest.approx(weights)
    # the aggregator received no distance: empty replies, then one integer count each
    replies = _distance_replies(run)
    assert len(replies) == K * (K - 1) // 2
    assert all(r.size == 0 for r in replies[:-1])
    assert replies[-1].tolist() == [float(copies[p]) for p in IDS]
    # each pair is one decrypted ciphertext of the scoring epoch, counted against its t
    distance_rows = [r for r in run.authority.log if r.purpose == "distance" and r.released]
    assert len(distance_rows) == K * (K - 1) // 2
    # the publication is under its own epoch; its witness (the same sum, compared before
    # release, never released) is decrypted under this one and counted too
    witness = Layout(n_samples=N, n_classes=C, slots=run.authority.keys.preset.slots).count
    assert run.authority.keys.releases - releases == len(distance_rows) + witness
    released = [e for e in run.sink.named("decryption.released") if e.get("step") == "copies"]
    assert [e["copies"] for e in released] == [copies]


def test_a_forged_distance_is_kept_but_named_by_the_recomputation(tmp_path: Path) -> None:
    """The key authority cannot see which uploads a ciphertext came from; the signed claim
    and the stored uploads can: the distance of (p00, p02) sent as (p00, p01)'s is named."""
    runs: list[Round] = []

    def swap(request: bytes) -> bytes:
        header, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        if header["purpose"] != "distance" or header["participant_ids"] != ["p00", "p01"]:
            return request
        handles = runs[0].engine._live_handles(runs[0].engine.state(1))
        forged = ckks_pair_distance(handles["p00"].matrix, handles["p02"].matrix)  # type: ignore[attr-defined]
        return decryption_request(
            round_id=1,
            purpose="distance",
            participant_ids=["p00", "p01"],
            shape=(N, C),
            ciphertext=forged.to_bytes(),
            signer=runs[0].agg.keys.signer,  # type: ignore[attr-defined]
            claim=header["claim"],  # type: ignore[arg-type]  # the honest claim
            epoch=header["epoch"],
        )

    runs.append(Round(tmp_path, swap=swap))  # the swap acts at the copies step, in publish
    run = runs[0]
    run.publish()
    scoring = run.agg.keys.public_context  # type: ignore[attr-defined]
    requests = [
        SignedRequestEvidence.from_event(e)
        for e in run.sink.named("decryption.requested")
        if e.get("epoch") == scoring.fingerprint.hex()
    ]
    assert sum(r.purpose == "distance" for r in requests) == K * (K - 1) // 2
    findings = recompute_requests(
        requests,
        uploads={1: {p: u.payload for p, u in run.engine.state(1).uploads.items()}},
        public=scoring,
        aggregator=run.agg.keys.signer.identity.public_key,  # type: ignore[attr-defined]
        shape=(N, C),
    )
    assert [(f.round_id, f.purpose, f.problem) for f in findings] == [
        (1, "distance", "the decrypted ciphertext is not the one its claim recomputes to")
    ]


def test_the_key_authority_refuses_a_distance_outside_the_plan_or_twice(tmp_path: Path) -> None:
    run = Round(tmp_path)
    assert run.authority.plans.tracker(1).phase == "copies"
    # a pair naming a participant outside the roster, or a roster with one
    with pytest.raises(DecryptionRefused, match="two distinct members of the copy set"):
        run.authority.handle(run.distance(("p00", "mallory")))
    with pytest.raises(DecryptionRefused, match=r"\['mallory'\] are not in the round's roster"):
        run.authority.handle(run.distance(("p00", "mallory"), roster=[*IDS[1:], "mallory"]))
    # the distance asked as a score, whose value would be sent back
    with pytest.raises(AuthorityRequestMalformed, match="claim op 'distance' cannot serve"):
        run.authority.handle(run.distance(("p00", "p01"), purpose="score"))
    for step in ("copies", "final"):  # p01 scored against the one-participant centre {p00}
        with pytest.raises(DecryptionRefused, match="not in the plan|allows 'copies' now"):
            run.authority.handle(run.as_score("p01", "p00", step))
    granted = run.distance(("p00", "p01"))
    header, raw = decode_frame(run.authority.handle(granted), KEY_AUTHORITY_REPLY)
    assert decode_array(header["array"], raw).size == 0  # kept by the key authority
    with pytest.raises(ServerRequestReplayed):
        run.authority.handle(granted)
    with pytest.raises(DecryptionRefused, match="already decrypted"):
        run.authority.handle(run.distance(("p01", "p00")))
    assert "already decrypted" in run.last_denial()
    released = [r for r in run.authority.log if r.purpose == "distance" and r.released]
    assert [r.participant_ids for r in released] == [("p00", "p01")]


def test_after_the_step_or_without_it_no_distance_is_decrypted(tmp_path: Path) -> None:
    run = Round(tmp_path / "done")
    run.publish()
    with pytest.raises(DecryptionRefused, match="allows 'done' now, not 'copies'"):
        run.authority.handle(run.distance(("p00", "p01")))  # a second release of the step
    off = Round(tmp_path / "off", detects_copies=False)  # the engine's plan names no step
    assert off.authority.plans.tracker(1).plan.copies is False
    with pytest.raises(DecryptionRefused, match="allows 'publication' now, not 'copies'"):
        off.authority.handle(off.distance(("p00", "p01")))
    assert "not 'copies'" in off.last_denial()
    weights, copies = off.publish()
    assert set(copies.values()) == {0}  # no detection: every u_k is 1
    assert not [r for r in off.authority.log if r.purpose == "distance" and r.released]
