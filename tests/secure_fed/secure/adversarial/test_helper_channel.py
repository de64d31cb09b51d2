"""Every aggregator-to-helper request is authenticated: replayed, altered or unsigned ops fail.

An outsider on the link (or a component that is not the aggregator) captures
the requests of an honest shares round and sends them again, alters a field,
strips the tag, or tags with a key of its own. Each operation the helper
serves (load, range, linear, open, finish) is attacked; each attempt is refused
with a typed error and an ``access.denied`` event, and nothing new is released.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from secure_fed.errors import OpeningRefused, ServerRequestReplayed, ServerRequestUnauthenticated
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.helper import helper_request
from secure_fed.secure.server_auth import ChannelKey
from secure_fed.wire import HELPER_REQUEST, decode_frame, encode_frame
from tests.secure_fed.secure.helpers import Harness, population

OPS = ("load", "range", "linear", "open", "finish")


class _Recorder:
    """The aggregator's channel to the helper, keeping a copy of every request."""

    def __init__(self, handle) -> None:  # type: ignore[no-untyped-def]
        self.handle, self.seen = handle, []

    def __call__(self, request: bytes) -> bytes:
        self.seen.append(request)
        return self.handle(request)  # type: ignore[no-any-return]

    def first(self, op: str) -> bytes:
        return next(r for r in self.seen if decode_frame(r, HELPER_REQUEST)[0]["op"] == op)


@pytest.fixture(scope="module")
def honest_round(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One published shares round of four participants, every helper request recorded."""
    ids = [f"p{j:02d}" for j in range(4)]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares", shape=(120, 10), participant_ids=ids, min_participants=3, audit=sink
    )
    harness = Harness(dep, tmp_path_factory.mktemp("ch"), ids=ids, min_participants=3, audit=sink)
    recorder = _Recorder(dep.helper.handle)  # type: ignore[attr-defined]
    aggregator = harness.engine.aggregator
    aggregator.keys = replace(aggregator.keys, helper=recorder)  # type: ignore[attr-defined]
    harness.round(1, population(4, 120, 10, seed=3))
    return dep, sink, recorder


@pytest.mark.parametrize("op", OPS)
def test_a_replayed_request_is_refused(honest_round, op: str) -> None:
    dep, sink, recorder = honest_round
    released, denied = len(dep.helper.log), len(sink.named("access.denied"))
    with pytest.raises(ServerRequestReplayed):
        dep.helper.handle(recorder.first(op))
    assert len(dep.helper.log) == released
    event = sink.named("access.denied")[denied]
    assert event["party"] == "helper" and event["op"] == op
    assert event["code"] == "SERVER_REQUEST_REPLAYED"


@pytest.mark.parametrize("op", OPS)
def test_an_altered_request_is_refused(honest_round, op: str) -> None:
    dep, sink, recorder = honest_round
    head, payload = decode_frame(recorder.first(op), HELPER_REQUEST)
    released = len(dep.helper.log)
    altered = [
        encode_frame(HELPER_REQUEST, {**head, "round_id": 2}, payload),  # re-targeted round
        encode_frame(HELPER_REQUEST, {**head, "extra": 1}, payload),  # any header field
        encode_frame(HELPER_REQUEST, head, payload + b"\x00"),  # the payload
    ]
    if "uids" in head:
        uids = list(head["uids"])  # type: ignore[arg-type]
        altered.append(encode_frame(HELPER_REQUEST, {**head, "uids": uids[:1]}, payload))
    if "weights" in head:
        altered.append(encode_frame(HELPER_REQUEST, {**head, "weights": [1, 0, 0]}, payload))
    for request in altered:
        with pytest.raises(ServerRequestUnauthenticated):
            dep.helper.handle(request)
        assert sink.named("access.denied")[-1]["code"] == "SERVER_REQUEST_UNAUTHENTICATED"
    assert len(dep.helper.log) == released


@pytest.mark.parametrize("op", OPS)
def test_an_unsigned_or_foreign_request_is_refused(honest_round, op: str) -> None:
    dep, sink, recorder = honest_round
    head, payload = decode_frame(recorder.first(op), HELPER_REQUEST)
    bare = {k: v for k, v in head.items() if k not in ("auth", "signature")}
    round_id = int(head["auth"]["round_id"])  # type: ignore[index]
    outsider = ChannelKey.generate("aggregator")  # same name, another key
    for request in (
        encode_frame(HELPER_REQUEST, bare, payload),
        helper_request(bare, payload, key=outsider, round_id=round_id + 1),
    ):
        with pytest.raises(ServerRequestUnauthenticated):
            dep.helper.handle(request)
    assert sink.named("access.denied")[-1]["op"] == op


def test_an_op_relabelled_under_a_valid_tag_is_refused(honest_round) -> None:
    """The op is a signed field: a finish request cannot be served as an open one."""
    dep, _, recorder = honest_round
    head, payload = decode_frame(recorder.first("finish"), HELPER_REQUEST)
    with pytest.raises(ServerRequestUnauthenticated):
        dep.helper.handle(encode_frame(HELPER_REQUEST, {**head, "op": "open"}, payload))


def test_an_older_round_is_refused_after_a_newer_one(honest_round) -> None:
    """A request of an earlier round, fresh nonce and valid tag, is a replay once round 2 ran."""
    dep, _, recorder = honest_round
    head, payload = decode_frame(recorder.first("linear"), HELPER_REQUEST)
    bare = {k: v for k, v in head.items() if k not in ("auth", "signature")}
    key = dep.helper.request_key
    newer = helper_request({**bare, "round_id": 2}, payload, key=key, round_id=2)
    with pytest.raises(OpeningRefused, match="no release plan|plan"):
        dep.helper.handle(newer)  # authentic, but round 2 has no plan: refused by the policy
    with pytest.raises(ServerRequestReplayed, match="after round 2"):
        dep.helper.handle(helper_request(bare, payload, key=key, round_id=1))
