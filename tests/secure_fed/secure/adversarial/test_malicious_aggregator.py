"""A cheating aggregator against the gatekeepers: every attack below is refused (typed, audited).

Shares mode holds against one malicious server: the helper derives every input
of an opening itself. CKKS mode refuses what its release plan excludes (the
accountability of what it cannot see is the signed, recomputable request log).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from crypto.ckks import EncryptedMatrix, weighted_sum
from crypto.shares import RING_WEIGHTS
from secure_fed.errors import DecryptionRefused, OpeningRefused
from secure_fed.secure.parties.helper import HelperParty, helper_request
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.wire import HELPER_REQUEST, decode_frame
from tests.secure_fed.secure.adversarial.attacker import helper_linear, helper_uids, ka_decrypt
from tests.secure_fed.secure.helpers import BOUND, plan, population
from tests.secure_fed.secure.signed_requests import signed


def _scored(dep, harness, preds, round_id: int = 1):  # type: ignore[no-untyped-def]
    """Run the scoring passes of ``round_id`` (the plan then allows only the publication)."""
    harness.engine.open(harness.config(round_id))
    harness.engine.start_collecting(round_id)
    for pid, matrix in preds.items():
        harness.verifier.accept(harness.envelope(pid, matrix, round_id), round_id=round_id)
    harness.engine.close(round_id)
    harness.engine.filter(round_id)
    handles = harness.engine._live_handles(harness.engine.state(round_id))
    harness.engine.aggregator.copies(handles, round_id=round_id)  # the plan's copies step, if any
    return handles


def _fresh(mode: str, k: int, tmp_path: Path, quorum: int = 3):  # type: ignore[no-untyped-def]
    from secure_fed.secure.audit import MemoryAuditSink
    from secure_fed.secure.deployment import SecureDeployment
    from tests.secure_fed.secure.helpers import Harness

    ids = [f"p{j:02d}" for j in range(k)]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode=mode, shape=(120, 10), participant_ids=ids, min_participants=quorum, audit=sink
    )
    harness = Harness(dep, tmp_path, ids=ids, min_participants=quorum, audit=sink)
    return dep, harness, sink, population(k, 120, 10, seed=5)


# --- shares ------------------------------------------------------------------------


def test_a_weight_that_rounds_to_zero_is_refused_not_an_exclusion(tmp_path: Path) -> None:
    assert int(RING_WEIGHTS.encode(np.array([1e-9]))[0]) == 0  # the attack's premise
    dep, harness, sink, preds = _fresh("shares", 3, tmp_path)
    _scored(dep, harness, preds)
    uids = helper_uids(dep)
    # (1 - 2e-9, 1e-9, 1e-9) would open p00's matrix exactly under a 3-participant label
    with pytest.raises(OpeningRefused, match="codec's resolution"):
        helper_linear(dep, [uids[p] for p in ("p00", "p01", "p02")], [1 - 2e-9, 1e-9, 1e-9])
    assert not dep.helper.log[-1].released
    assert "resolution" in str(sink.named("access.denied")[-1]["reason"])


def _open_request(dep, harness, **override):  # type: ignore[no-untyped-def]
    """A ranking-pass Beaver request as the aggregator would send it, with ``override``."""
    uids = [helper_uids(dep)[p] for p in harness.ids]
    head = {"op": "open", "kind": "ranking", "op_id": "evil", "tensor": "ranking-evil"}
    head.update({"round_id": 1, "uids": uids, "centre": uids, "parts": [0], **override})
    return signed(dep, head)  # the cheating aggregator holds the channel key


@pytest.mark.parametrize(
    "override",
    [
        {"matrix": {"dtype": "u8", "shape": [1, 10]}},  # a one-hot whitening
        {"center": {"dtype": "f8", "shape": [120, 10]}},  # a centre of zeros
        {"samples": 1},  # one row: a single sample's square
        {"g": 0, "fz": 12},
    ],
)
def test_the_helper_derives_whitening_centre_and_rows_itself(override, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dep, harness, sink, preds = _fresh("shares", 3, tmp_path)
    harness.engine.open(harness.config(1))
    for p, m in preds.items():
        harness.engine.aggregator.load(harness.encoders[p].encode(m))
    with pytest.raises(OpeningRefused, match="derives"):
        dep.helper.handle(_open_request(dep, harness, **override))
    assert "derives" in str(sink.named("access.denied")[-1]["reason"])


def test_a_centre_outside_the_plan_is_refused(tmp_path: Path) -> None:
    dep, harness, sink, preds = _fresh("shares", 3, tmp_path)
    harness.engine.open(harness.config(1))
    for p, m in preds.items():
        harness.engine.aggregator.load(harness.encoders[p].encode(m))
    uids = helper_uids(dep)
    # centre = the victim alone: every other score would be ||x_k - x_victim||^2
    with pytest.raises(OpeningRefused, match="centre must be the mean"):
        dep.helper.handle(_open_request(dep, harness, centre=[uids["p00"]]))


class _Replayer:
    """The aggregator's channel to the helper, reusing the first Beaver triples for the next op."""

    def __init__(self, helper: HelperParty) -> None:
        self.helper, self.first = helper, None

    def __call__(self, request: bytes) -> bytes:
        head, payload = decode_frame(request, HELPER_REQUEST)
        if head.get("op") == "open" and self.first is None:
            self.first = (head["tensor"], payload)  # the ranking pass: W = I
        elif head.get("op") == "open":
            tensor, payload = self.first
            replay = {**head, "tensor": tensor, "parts": [len(payload)]}
            request = helper_request(
                {k: v for k, v in replay.items() if k not in ("auth", "signature")},
                payload,
                key=self.helper.request_key,
                round_id=int(head["round_id"]),
            )
        return self.helper.handle(request)


def test_a_replayed_triple_label_is_refused_and_leaves_a_log_row(tmp_path: Path) -> None:
    dep, harness, sink, preds = _fresh("shares", 4, tmp_path)
    harness.engine.aggregator.keys = _with_helper(
        harness.engine.aggregator.keys, _Replayer(dep.helper)
    )
    with pytest.raises(OpeningRefused, match="already used"):
        harness.round(1, preds)  # the second Beaver operation reuses the ranking triples
    row = dep.helper.log[-1]
    assert not row.released and row.purpose == "moments"
    denied = sink.named("access.denied")[-1]
    assert denied["party"] == "helper" and "already used" in str(denied["reason"])


def test_triple_labels_are_refused_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "helper.sqlite"
    first = HelperRegistry(path)
    assert first.claim_triple(1, "ranking-1") and not first.claim_triple(1, "ranking-1")
    first.close()
    again = HelperRegistry(path)  # the helper restarted: the registry is its own file
    assert not again.claim_triple(1, "ranking-1") and again.claim_triple(1, "ranking-2")
    assert again.bind_upload("u1", 1) and not again.bind_upload("u1", 2)


def test_a_replayed_label_after_a_restart_is_refused_with_a_log_row(shares, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    dep, sink = shares
    registry = HelperRegistry(tmp_path / "helper.sqlite")
    registry.claim_triple(1, "ranking-1")  # used before the restart
    helper = HelperParty(
        shape=dep.helper.shape,
        min_participants=3,
        secrets=dep.helper.secrets,
        dealer_key=dep.helper.dealer_key,
        channel_key=dep.helper.channel_key,
        audit=sink,
        registry=HelperRegistry(tmp_path / "helper.sqlite"),
        request_key=dep.helper.request_key,
        mac_key=dep.helper.mac_key,
        mask_secret=dep.helper.mask_secret,
    )
    from secure_fed.secure.modes.shares import SharesAggregator

    keys = _with_helper(dep.server_keys(), helper.handle)
    agg = SharesAggregator(shape=dep.shape, bound=BOUND, keys=keys, min_participants=3)
    preds = population(3, *dep.shape, seed=2)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    agg.begin_round(plan(1, dep.shape))  # fixes it with the restarted helper too
    with pytest.raises(OpeningRefused, match="already used"):
        agg.score(handles, round_id=1)
    assert not helper.log[-1].released and "already used" in str(
        sink.named("access.denied")[-1]["reason"]
    )


def _with_helper(keys, channel):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(keys, helper=channel)


# --- ckks ------------------------------------------------------------------------------


@pytest.mark.slow
def test_ckks_weights_one_zero_zero_are_refused(tmp_path: Path) -> None:
    dep, harness, sink, preds = _fresh("ckks", 3, tmp_path)
    handles = _scored(dep, harness, preds)
    agg = harness.engine.aggregator
    ups = agg._uploads(handles)
    ids = ["p00", "p01", "p02"]
    uploads = [[p, handles[p].digest] for p in ids]
    for weights, fragment in [
        ([1.0, 0.0, 0.0], r"\(0, 1\]"),
        ([1 - 2e-9, 1e-9, 1e-9], "resolution"),
    ]:
        matrix = weighted_sum([ups[p] for p in ids], weights)  # p00's upload, decrypted
        claim = {"op": "weighted_sum", "uploads": uploads, "weights": weights}
        with pytest.raises(DecryptionRefused, match=fragment):
            ka_decrypt(
                agg, purpose="aggregate", ids=ids, matrix=matrix, claim=claim, shape=agg.shape
            )
        assert not dep.authority.log[-1].released
    assert "resolution" in str(sink.named("access.denied")[-1]["reason"])


@pytest.mark.slow
def test_ckks_upload_relabelled_as_an_aggregate_of_invented_ids_is_refused(tmp_path: Path) -> None:
    dep, harness, sink, preds = _fresh("ckks", 3, tmp_path)
    handles = _scored(dep, harness, preds)
    agg = harness.engine.aggregator
    up = agg._uploads(handles)["p00"]
    relabelled = EncryptedMatrix(
        kind="aggregate",
        preset=up.preset,
        fingerprint=up.fingerprint,
        layout=up.layout,
        vectors=up.vectors,
        contributors=3,
    )
    invented = ["x01", "x02", "x03"]
    claim = {
        "op": "weighted_sum",
        "uploads": [[p, "ab" * 32] for p in invented],
        "weights": [1 / 3] * 3,
    }
    with pytest.raises(DecryptionRefused, match="not in the round's roster"):
        ka_decrypt(
            agg, purpose="aggregate", ids=invented, matrix=relabelled, claim=claim, shape=agg.shape
        )
    assert not dep.authority.log[-1].released
