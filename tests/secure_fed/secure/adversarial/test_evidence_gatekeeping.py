"""The evidence step under a curious aggregator: only the plan's slice, once per participant.

Real deployments, real engine rounds (K = 4, signed envelopes), the gatekeepers of each
secure mode. The evidence of correctness is one public linear scalar per participant
(``sum(M * p_k)``, ``M`` the mask of the labeled slice the round's release plan names).
The attacker is the aggregator, using our own classes: it asks for a mask that selects
one row (one prediction's centred logit), for the plan's rows with other labels, for
two participants in one scalar, for a participant twice, replays a granted request,
and, in ckks mode, sends the key authority a ciphertext computed with a one-row mask
under the honest claim, which the key authority cannot see and the recomputation from
the stored uploads names.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crypto.ckks import EncryptedMatrix, Layout
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    OpeningRefused,
    ServerRequestReplayed,
    SharesOpeningForged,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.computation.evidence import (
    ckks_evidence,
    integer_mask,
    share_evidence,
    slice_fields,
)
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.recompute import SignedRequestEvidence, recompute_requests
from secure_fed.secure.scoring.evidence import EvidenceSlice, plain_evidence
from secure_fed.wire import HELPER_REQUEST, KEY_AUTHORITY_REQUEST, decode_frame, encode_array
from tests.secure_fed.secure.helpers import Harness, population

N, C, K, ROWS = 200, 10, 4, 80
IDS = [f"p{j:02d}" for j in range(K)]
_RNG = np.random.default_rng(11)
SLICE = EvidenceSlice(
    rows=tuple(sorted(int(r) for r in _RNG.choice(N, size=ROWS, replace=False))),
    labels=tuple(int(y) for y in _RNG.integers(0, C, size=ROWS)),
)
ONE_ROW = EvidenceSlice(rows=SLICE.rows[:1], labels=SLICE.labels[:1])
PREDS = population(K, N, C, seed=4)
EXPECTED = plain_evidence(PREDS, SLICE.mask((N, C)))

Channel = Callable[[bytes], Any]


class Recorder:
    """A channel that records every request before passing it on (or to ``swap``)."""

    def __init__(self, inner: Channel, swap: Callable[[bytes], bytes] | None = None) -> None:
        self.inner, self.swap = inner, swap
        self.sent: list[bytes] = []

    def __call__(self, request: bytes) -> Any:
        request = self.swap(request) if self.swap is not None else request
        self.sent.append(request)
        return self.inner(request)


class Round:
    """One round of ``mode`` driven up to the filter; the aggregator's channel is recorded."""

    def __init__(
        self, mode: str, tmp_path: Path, *, swap: Callable[[bytes], bytes] | None = None
    ) -> None:
        self.sink = MemoryAuditSink()
        self.dep = SecureDeployment.create(
            mode=mode, shape=(N, C), participant_ids=IDS, min_participants=3, audit=self.sink
        )
        self.harness = Harness(
            self.dep, tmp_path, ids=IDS, min_participants=3, audit=self.sink, evidence=SLICE
        )
        self.engine, self.agg = self.harness.engine, self.harness.engine.aggregator
        channel = "authority" if mode == "ckks" else "helper"
        self.channel = Recorder(getattr(self.agg.keys, channel), swap)  # type: ignore[attr-defined]
        self.agg.keys = replace(self.agg.keys, **{channel: self.channel})  # type: ignore[attr-defined]
        self.engine.open(self.harness.config(1))
        self.engine.start_collecting(1)
        for pid, matrix in PREDS.items():
            self.harness.verifier.accept(self.harness.envelope(pid, matrix, 1), round_id=1)
        self.engine.close(1)
        self.engine.filter(1)
        self.handles = self.engine._live_handles(self.engine.state(1))

    @property
    def gatekeeper(self) -> Any:
        return self.dep.helper if self.dep.mode == "shares" else self.dep.authority  # type: ignore[attr-defined]

    def publish(self) -> dict[str, float]:
        """Publish the round; return the evidence the engine audited per participant."""
        self.engine.publish(1)
        events = self.sink.named("outlier.decision")
        return {str(e["participant_id"]): float(e["evidence"]) for e in events}  # type: ignore[arg-type]

    def last_denial(self) -> str:
        return str(self.sink.named("access.denied")[-1]["reason"])

    # -- the attacker's requests, built with our classes ------------------------------

    def ckks_request(
        self,
        pids: list[str],
        piece: EvidenceSlice,
        *,
        ciphertext: EncryptedMatrix | None = None,
        samples: int | None = None,
    ) -> bytes:
        handle = self.handles[pids[0]]
        claim = {
            "op": "evidence",
            "uploads": [[p, self.handles[p].digest] for p in pids],  # type: ignore[attr-defined]
            **slice_fields(piece),
            "samples": len(piece.rows) if samples is None else samples,
            "step": "evidence",
            "roster": IDS,
        }
        matrix = ciphertext or ckks_evidence(handle.matrix, piece.mask((N, C)))  # type: ignore[attr-defined]
        return decryption_request(
            round_id=1,
            purpose="score",
            participant_ids=pids,
            shape=(len(piece.rows), C),
            ciphertext=matrix.to_bytes(),
            signer=self.agg.keys.signer,  # type: ignore[attr-defined]
            claim=claim,
            epoch=self.agg.keys.public_context.fingerprint.hex(),  # type: ignore[attr-defined]
        )

    def shares_request(
        self, pids: list[str], piece: EvidenceSlice, sums: np.ndarray | None = None
    ) -> bytes:
        shares = [self.handles[p].share for p in pids]  # type: ignore[attr-defined]
        mask = integer_mask(rows=np.array(piece.rows), labels=np.array(piece.labels), shape=(N, C))
        mine = np.array([share_evidence(s, mask) for s in shares]) if sums is None else sums
        meta, raw = encode_array(mine, "u8")
        head: dict[str, object] = {
            "op": "evidence",
            "uids": [self.handles[p].uid for p in pids],  # type: ignore[attr-defined]
            "round_id": 1,
            "array": meta,
            "parts": [len(raw)],
            **slice_fields(piece),
        }
        if self.agg.keys.mac_key is not None:  # type: ignore[attr-defined]
            head["mac_seed_commit"] = bytes(32).hex()  # authenticated shares: a MAC-checked opening
        return self.agg.keys.tagged(head, raw, round_id=1)  # type: ignore[attr-defined, no-any-return]

    def request(self, pids: list[str], piece: EvidenceSlice) -> bytes:
        if self.dep.mode == "ckks":
            return self.ckks_request(pids, piece)
        return self.shares_request(pids, piece)


def _evidence_requests(sent: list[bytes], mode: str) -> list[bytes]:
    kind = KEY_AUTHORITY_REQUEST if mode == "ckks" else HELPER_REQUEST
    out = []
    for request in sent:
        header, _ = decode_frame(request, kind)
        claim = header.get("claim")
        if header.get("op") == "evidence" or (
            isinstance(claim, dict) and claim["op"] == "evidence"
        ):
            out.append(request)
    return out


REFUSAL = {"ckks": DecryptionRefused, "shares": OpeningRefused}


def _scores_released(run: Round) -> Counter[str]:
    """Scalars per participant the gatekeeper released (its own log)."""
    rows = [r for r in run.gatekeeper.log if r.released and r.purpose == "score"]
    return Counter(p for r in rows for p in r.participant_ids)


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_one_evidence_scalar_per_participant_equal_to_the_plaintext_then_no_more(
    mode: str, tmp_path: Path
) -> None:
    run = Round(mode, tmp_path)
    audited = run.publish()
    assert audited == pytest.approx(EXPECTED, rel=2e-3, abs=1e-3)
    assert _scores_released(run) == dict.fromkeys(IDS, 3)  # ranking, final, evidence: one each
    granted = _evidence_requests(run.channel.sent, mode)
    assert len(granted) == (K if mode == "ckks" else 1)  # shares: one opening for the roster
    with pytest.raises(ServerRequestReplayed):
        run.gatekeeper.handle(granted[0])  # the same bytes again
    assert run.sink.named("access.denied")[-1]["code"] == "SERVER_REQUEST_REPLAYED"
    with pytest.raises(REFUSAL[mode], match="allows 'done' now, not 'evidence'"):
        run.gatekeeper.handle(run.request(["p00"], SLICE))  # a fresh request, a second time
    assert "not 'evidence'" in run.last_denial()


@pytest.mark.parametrize("mode", ["ckks", "shares"])
def test_a_mask_other_than_the_plans_slice_is_refused_and_changes_nothing(
    mode: str, tmp_path: Path
) -> None:
    run = Round(mode, tmp_path)
    refusal = REFUSAL[mode]
    relabelled = replace(SLICE, labels=tuple((y + 1) % C for y in SLICE.labels))
    for piece in (ONE_ROW, relabelled):  # one row reveals one prediction's centred logit
        with pytest.raises(refusal, match="the mask is not the plan's labeled slice"):
            run.gatekeeper.handle(run.request(["p00"], piece))
        assert "not the plan's labeled slice" in run.last_denial()
    if mode == "ckks":  # one ciphertext, one scalar: it belongs to one participant
        with pytest.raises(refusal, match="a score belongs to exactly one participant"):
            run.gatekeeper.handle(run.request(["p00", "p01"], SLICE))
        with pytest.raises(AuthorityRequestMalformed, match="lists its 'samples' rows"):
            run.gatekeeper.handle(run.ckks_request(["p00"], ONE_ROW, samples=ROWS))
    else:  # one scalar per upload named: the same participant twice is refused
        with pytest.raises(refusal, match="ids repeat"):
            run.gatekeeper.handle(run.shares_request(["p00", "p00"], SLICE))
    assert _scores_released(run) == dict.fromkeys(IDS, 2)  # ranking and final: nothing refused
    assert run.publish() == pytest.approx(EXPECTED, rel=2e-3, abs=1e-3)


def test_a_forged_ckks_evidence_is_decrypted_but_named_by_the_recomputation(
    tmp_path: Path,
) -> None:
    """The key authority cannot see the mask; the signed claim plus the stored uploads can."""
    cell = (ONE_ROW.rows[0], ONE_ROW.labels[0])
    runs: list[Round] = []

    def swap(request: bytes) -> bytes:
        claim = _claim_of(request)
        if claim["op"] != "evidence" or claim["uploads"][0][0] != "p01":
            return request
        run = runs[0]
        header, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        return decryption_request(
            round_id=1,
            purpose="score",
            participant_ids=["p01"],
            shape=(ROWS, C),
            ciphertext=_one_cell(run.handles["p01"].matrix, cell).to_bytes(),  # type: ignore[attr-defined]
            signer=run.agg.keys.signer,  # type: ignore[attr-defined]
            claim=claim,  # the honest claim: the plan's slice
            epoch=header["epoch"],
        )

    runs.append(Round("ckks", tmp_path, swap=swap))
    run = runs[0]
    audited = run.publish()
    # the key authority decrypted one prediction's logit as p01's "evidence" (it cannot tell)
    assert audited["p01"] == pytest.approx(float(PREDS["p01"][cell]), abs=1e-2)
    scoring = run.agg.keys.public_context  # type: ignore[attr-defined]
    requests = [
        SignedRequestEvidence.from_event(e)
        for e in run.sink.named("decryption.requested")
        if e.get("epoch") == scoring.fingerprint.hex()
    ]
    # ranking, final and evidence per participant, moments, and the copies step's pairs
    assert len(requests) == 3 * K + 1 + K * (K - 1) // 2
    findings = recompute_requests(
        requests,
        uploads={1: {p: u.payload for p, u in run.engine.state(1).uploads.items()}},
        public=scoring,
        aggregator=run.agg.keys.signer.identity.public_key,  # type: ignore[attr-defined]
        shape=(N, C),
    )
    forged = next(
        r
        for r in run.channel.sent
        if _claim_of(r)["uploads"][0][0] == "p01" and _claim_of(r)["op"] == "evidence"
    )
    header, _ = decode_frame(forged, KEY_AUTHORITY_REQUEST)
    assert [(f.round_id, f.purpose, f.problem) for f in findings] == [
        (1, "score", "the decrypted ciphertext is not the one its claim recomputes to")
    ]
    signed = [
        e for e in run.sink.named("decryption.requested") if e["signature"] == header["signature"]
    ]
    assert [e["request_sm3"] for e in signed] == [findings[0].request_sm3]


def _claim_of(request: bytes) -> dict[str, Any]:
    header, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
    claim = header["claim"]
    assert isinstance(claim, dict)
    return claim


def _one_cell(upload: EncryptedMatrix, cell: tuple[int, int]) -> EncryptedMatrix:
    """The attack: one cell of an upload, laid out as an honest evidence over ``ROWS`` rows."""
    mask = np.zeros((N, C))
    mask[cell] = math.sqrt(ROWS)  # the key authority divides by sqrt(ROWS)
    single = ckks_evidence(upload, mask)
    return EncryptedMatrix(
        kind="score",
        preset=single.preset,
        fingerprint=single.fingerprint,
        layout=Layout(n_samples=ROWS, n_classes=C, slots=single.layout.slots),
        vectors=single.vectors,
    )


def test_a_shares_aggregator_mask_on_its_own_share_reveals_only_the_plans_evidence(
    tmp_path: Path,
) -> None:
    """The helper applies the plan's mask to its own share, whatever sums the aggregator
    sends. With authenticated shares (the default) it also reconstructs the value before
    answering: the aggregator's share is uniform, so sums under another mask leave the
    evidence's bound and are refused as forged (round aborted, nothing released); without
    MACs its reply ``M . x1`` gave the aggregator ``M . x0 + M . x1``, the plan's evidence."""
    run = Round("shares", tmp_path)
    share = run.handles["p00"].share  # type: ignore[attr-defined]
    one_row = integer_mask(
        rows=np.array(ONE_ROW.rows), labels=np.array(ONE_ROW.labels), shape=(N, C)
    )
    forged = np.array([share_evidence(share, one_row)], dtype=np.uint64)
    released = sum(r.released for r in run.gatekeeper.log)
    with pytest.raises(SharesOpeningForged, match="outside its public bound"):
        run.gatekeeper.handle(run.shares_request(["p00"], SLICE, forged))
    assert sum(r.released for r in run.gatekeeper.log) == released  # nothing of it released
