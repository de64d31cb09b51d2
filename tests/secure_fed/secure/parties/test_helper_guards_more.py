"""More guards of the shares-mode helper that surviving mutants showed unchecked.

``scripts/mutation gatekeepers`` changed each of these and the selected tests
stayed green: the element count of a sealed share (a share sealed correctly,
under the participant's own enrolment secret, but of another size loaded and
failed only later), the load's acknowledgement, the values the helper opens with
the aggregator (it runs the plan on them: its whitening and scores must be the
aggregator's, bit for bit in the ring), the ring dtype of its output shares, and the
refusals of a Beaver ``finish`` with their exact texts.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from crypto.shares import ShareBundle, ShareLabel, ShareMacKey
from crypto.sm import SM4GCM
from secure_fed.errors import AuthorityRequestMalformed, OpeningRefused, UploadMalformed
from secure_fed.secure.computation.share_ops import CODEC
from secure_fed.secure.modes.shares import SharesAggregator
from secure_fed.secure.parties.helper import seal_key
from secure_fed.secure.scoring.mahalanobis import ScoreReport
from secure_fed.wire import HELPER_REPLY, HELPER_REQUEST, SHARES_UPLOAD, decode_frame
from tests.secure_fed.secure.conftest import IDS, C, N
from tests.secure_fed.secure.helpers import BOUND, install_helper_plan, plan, population
from tests.secure_fed.secure.signed_requests import signed


def _sealed(secret: bytes, pid: str, uid: str, count: int) -> bytes:
    """Party 1's seeded share of ``count`` values, tagged and sealed as a participant does."""
    label = ShareLabel(round_id=0, participant_id=pid, tensor=f"pred-{uid}")
    bundle = ShareBundle.from_seed(
        secrets.token_bytes(32), label=label, count=count, frac_bits=CODEC.frac_bits
    )
    blob = bundle.to_bytes(ShareMacKey.derive(secret, recipient="helper"))
    return SM4GCM(seal_key(secret)).encrypt(blob, associated_data=f"{pid}|{uid}".encode())


def _load(dep, pid: str, uid: str, payload: bytes) -> bytes:  # type: ignore[no-untyped-def]
    return bytes(
        dep.helper.handle(
            signed(dep, {"op": "load", "participant_id": pid, "upload_id": uid}, payload)
        )
    )


@pytest.mark.parametrize("count", [N * C - 1, N * C + 1, C, 1])
def test_a_sealed_share_of_another_size_is_refused(shares_plain, count: int) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares_plain
    pid = IDS[1]
    payload = _sealed(dep.helper.secrets[pid], pid, "u-size", count)
    with pytest.raises(
        UploadMalformed,
        match=rf"^\[UPLOAD_MALFORMED\] helper share of '{pid}' refused: "
        rf"\[CRYPTO_SHARE_TAMPERED\] share blob count {count} is not the expected count {N * C}$",
    ):
        _load(dep, pid, "u-size", payload)
    # nothing was kept: the upload id is still free for a share of the right size
    assert decode_frame(
        _load(dep, pid, "u-size", _sealed(dep.helper.secrets[pid], pid, "u-size", N * C)),
        HELPER_REPLY,
    ) == ({"ok": True}, b"")


def test_a_load_and_its_reload_are_acknowledged_without_a_body(shares_plain) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares_plain
    pid = IDS[2]
    payload = _sealed(dep.helper.secrets[pid], pid, "u-ack", N * C)
    assert decode_frame(_load(dep, pid, "u-ack", payload), HELPER_REPLY) == ({"ok": True}, b"")
    assert decode_frame(_load(dep, pid, "u-ack", payload), HELPER_REPLY) == ({"ok": True}, b"")


Relay = Callable[[dict[str, object], bytes], tuple[dict[str, object], bytes]]


def _scored(
    dep: Any, alter: Relay | None = None
) -> tuple[SharesAggregator, ScoreReport, list[dict[str, object]]]:
    """Score round 1 of four uploads through the helper; ``alter`` rewrites each request."""
    replies: list[dict[str, object]] = []

    def relay(request: bytes) -> bytes:
        head, payload = decode_frame(request, HELPER_REQUEST)
        if alter is not None:
            head, payload = alter(head, payload)
            request = signed(dep, head, payload)
        reply = dep.helper.handle(request)
        replies.append(decode_frame(reply, HELPER_REPLY)[0])
        return bytes(reply)

    agg = SharesAggregator(
        shape=(N, C), bound=BOUND, keys=replace(dep.server_keys(), helper=relay), min_participants=3
    )
    preds = population(4, N, C, seed=11)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    return agg, agg.score(handles, round_id=1), replies


def test_the_helper_runs_the_plan_on_the_values_it_opened_with_the_aggregator(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    _, report, replies = _scored(dep)
    tracker = dep.helper.plans.tracker(1)
    assert tracker is not None and tracker.phase == "publication"
    assert tracker.final_scores == pytest.approx(report.scores, rel=1e-9)
    assert len(tracker.final_scores) == 4
    assert tracker.whiten is not None and np.isfinite(tracker.whiten).all()
    # every output share goes back as ring words (u8), never as floats
    arrays = [r["array"] for r in replies if "array" in r]
    assert arrays and all(isinstance(a, dict) and a["dtype"] == "u8" for a in arrays)


def test_a_finish_names_an_open_operation(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares
    request = {"op": "finish", "op_id": "nope", "round_id": 1, "parts": [0, 0]}
    with pytest.raises(
        AuthorityRequestMalformed,
        match=r"^\[AUTHORITY_REQUEST_MALFORMED\] no open Beaver operation 'nope'$",
    ):
        dep.helper.handle(signed(dep, request))


def _on_finish(
    change: Callable[[dict[str, object], bytes], tuple[dict[str, object], bytes]],
) -> Relay:
    def alter(head: dict[str, object], payload: bytes) -> tuple[dict[str, object], bytes]:
        return change(head, payload) if head.get("op") == "finish" else (head, payload)

    return alter


def test_an_output_share_of_another_shape_is_refused(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares

    def reshape(head: dict[str, object], payload: bytes) -> tuple[dict[str, object], bytes]:
        meta = dict(head["array"])  # type: ignore[call-overload]
        meta["shape"] = [1, *list(meta["shape"])]
        return {**head, "array": meta}, payload

    with pytest.raises(
        AuthorityRequestMalformed,
        match=r"^\[AUTHORITY_REQUEST_MALFORMED\] "
        r"the aggregator's output share has the wrong shape$",
    ):
        _scored(dep, _on_finish(reshape))


def test_a_tampered_opening_is_refused_with_the_reason(shares) -> None:  # type: ignore[no-untyped-def]
    dep, _ = shares

    def flip(head: dict[str, object], payload: bytes) -> tuple[dict[str, object], bytes]:
        return head, bytes([payload[0] ^ 1]) + payload[1:]

    with pytest.raises(
        AuthorityRequestMalformed,
        match=r"^\[AUTHORITY_REQUEST_MALFORMED\] aggregator opening refused: \[CRYPTO_[A-Z_]+\] .+",
    ):
        _scored(dep, _on_finish(flip))


@pytest.mark.parametrize(
    ("carried", "named"),
    [
        ({"whitening": [[1.0]]}, "['whitening']"),
        ({"center": [0], "samples": 3}, "['center', 'samples']"),
        ({"g": 1, "fz": 16, "matrix": [[1]]}, "['fz', 'g', 'matrix']"),
    ],
)
def test_an_opening_that_carries_an_input_the_helper_derives_is_refused(  # type: ignore[no-untyped-def]
    shares, carried: dict[str, object], named: str
) -> None:
    dep, _ = shares
    agg = dep.aggregator(bound=BOUND)
    uids = []
    for pid, matrix in population(3, N, C, seed=5).items():
        payload = dep.encoder(pid, bound=BOUND).encode(matrix)
        agg.load(payload)
        uids.append(str(decode_frame(payload, SHARES_UPLOAD)[0]["upload_id"]))
    install_helper_plan(dep.helper, plan(1, (N, C)))
    request = {"op": "open", "kind": "ranking", "op_id": "r1", "round_id": 1, "uids": uids}
    with pytest.raises(
        OpeningRefused,
        match=rf"^\[[A-Z_]+\] round 1, score: the helper derives {re.escape(named)} itself; "
        r"the request set them$",
    ):
        dep.helper.handle(signed(dep, {**request, "centre": uids, "parts": [0], **carried}))
    row = dep.helper.log[-1]
    assert not row.released and row.participant_ids == ("p00",)
