"""Beaver triples are dealt only for signed, fresh requests; used labels survive a restart.

The shares aggregator asks the key authority for triples with an SM2-signed
deal request (round, tensor, count, nonce); the key authority deals nothing
for an unsigned, foreign-signed, altered or replayed one. The helper's
triple-label registry is a file when the deployment names one: a triple blob
replayed after the helper restarted is still refused.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    OpeningRefused,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.modes.shares import SharesAggregator
from secure_fed.secure.parties.helper import HelperParty
from secure_fed.secure.parties.key_authority import deal_request
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import HELPER_REQUEST, KEY_AUTHORITY_REQUEST, decode_frame, encode_frame
from tests.secure_fed.secure.helpers import BOUND, Harness, population

IDS = [f"p{j:02d}" for j in range(4)]


class _Tap:
    """A byte channel that keeps a copy of every request it forwards."""

    def __init__(self, forward) -> None:  # type: ignore[no-untyped-def]
        self.forward, self.seen = forward, []

    def __call__(self, request: bytes):  # type: ignore[no-untyped-def]
        self.seen.append(request)
        return self.forward(request)


def _round(tmp_path: Path, registry: Path | None = None):  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares",
        shape=(120, 10),
        participant_ids=IDS,
        min_participants=3,
        audit=sink,
        registry_path=registry,
    )
    harness = Harness(dep, tmp_path, ids=IDS, min_participants=3, audit=sink)
    agg = harness.engine.aggregator
    keys = agg.keys  # type: ignore[attr-defined]
    dealer, helper, ranges = _Tap(keys.dealer), _Tap(keys.helper), _Tap(keys.range_dealer)
    agg.keys = replace(keys, dealer=dealer, helper=helper, range_dealer=ranges)  # type: ignore[attr-defined]
    uploads: list[bytes] = []
    load = agg.load

    def keep(payload: bytes):  # type: ignore[no-untyped-def]
        uploads.append(payload)
        return load(payload)

    agg.load = keep  # type: ignore[method-assign]
    harness.round(1, population(4, 120, 10, seed=9))
    return dep, sink, harness, dealer, helper, uploads, ranges


def _macs(dep):  # type: ignore[no-untyped-def]
    return {"key_aggregator": dep._macs["aggregator"], "key_helper": dep._macs["helper"]}


def test_an_honest_round_deals_only_through_signed_requests(tmp_path: Path) -> None:
    dep, _, _, dealer, _, _, _ = _round(tmp_path)
    assert len(dealer.seen) == 5  # ranking, moments, final; copies: distances, bit conversion
    for request in dealer.seen:
        head, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        assert head["auth"]["signer"] == "aggregator" and head["auth"]["purpose"] == "triples"  # type: ignore[index]
    triples = [r for r in dep.authority.log if r.purpose.startswith("triples:")]
    assert len(triples) == 5  # every triple the authority dealt was asked for, signed


def test_unsigned_foreign_altered_and_replayed_deals_are_refused(tmp_path: Path) -> None:
    dep, sink, _, dealer, _, _, _ = _round(tmp_path)
    dealt = len(dep.authority.log)
    captured = dealer.seen[-1]
    head, payload = decode_frame(captured, KEY_AUTHORITY_REQUEST)
    bare = {k: v for k, v in head.items() if k not in ("auth", "signature")}
    outsider = ServerSigningKey.generate("aggregator")  # the right name, another key
    with pytest.raises(ServerRequestReplayed):
        dep.authority.handle_deal(captured, **_macs(dep))
    attempts = [
        encode_frame(KEY_AUTHORITY_REQUEST, bare, payload),  # unsigned
        deal_request(round_id=1, tensor="final-9", count=10, signer=outsider),
        encode_frame(KEY_AUTHORITY_REQUEST, {**head, "count": 10**6}, payload),  # altered
        encode_frame(KEY_AUTHORITY_REQUEST, {**head, "tensor": "ranking-9"}, payload),
    ]
    for request in attempts:
        with pytest.raises(ServerRequestUnauthenticated):
            dep.authority.handle_deal(request, **_macs(dep))
    assert len(dep.authority.log) == dealt  # nothing was dealt
    denied = [e for e in sink.named("access.denied") if e["party"] == "key_authority"]
    assert len(denied) == 1 + len(attempts)


def test_a_deployment_without_a_signing_key_deals_nothing(tmp_path: Path) -> None:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares", shape=(120, 10), participant_ids=IDS, min_participants=3, audit=sink
    )
    keys = replace(dep.server_keys(), signing_key=None)  # type: ignore[attr-defined]
    with pytest.raises(ModeSetupInvalid, match="signing_key"):
        keys.deal(round_id=1, tensor="t", count=1)
    stranger = ServerSigningKey.generate("stranger")
    with pytest.raises(ServerRequestUnauthenticated, match="stranger"):
        keys.dealer(deal_request(round_id=1, tensor="t", count=1, signer=stranger))


def test_the_registry_file_refuses_a_replayed_triple_after_a_helper_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "helper-registry.sqlite"
    dep, sink, harness, _, helper_tap, uploads, _ = _round(tmp_path, registry=path)
    assert dep.helper.registry.path == str(path)  # type: ignore[attr-defined]
    captured = next(
        r for r in helper_tap.seen if decode_frame(r, HELPER_REQUEST)[0]["op"] == "open"
    )
    dep.helper.registry.close()  # type: ignore[attr-defined]
    old = dep.helper  # type: ignore[attr-defined]
    restarted = HelperParty(  # the helper process restarted: its own file, nothing in memory
        shape=old.shape,
        min_participants=3,
        secrets=old.secrets,
        dealer_key=old.dealer_key,
        channel_key=old.channel_key,
        audit=sink,
        registry=HelperRegistry(path),
        request_key=old.request_key,
        mac_key=old.mac_key,
        mask_secret=old.mask_secret,
    )
    keys = replace(dep.server_keys(), helper=restarted.handle)  # type: ignore[attr-defined]
    agg = SharesAggregator(shape=dep.shape, bound=BOUND, keys=keys, min_participants=3)
    agg.begin_round(harness.engine.aggregator._plans[1].plan)  # type: ignore[attr-defined]
    for payload in uploads:  # the aggregator reloads the round's uploads after the restart
        agg.load(payload)
    # the captured request's nonce is unknown to the restarted verifier; the label is not
    with pytest.raises(OpeningRefused, match="already used"):
        restarted.handle(captured)
    assert not restarted.log[-1].released
    assert "already used" in str(sink.named("access.denied")[-1]["reason"])


def test_without_a_registry_file_the_deployment_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="secure_fed.secure.inprocess.shares"):
        SecureDeployment.create(
            mode="shares", shape=(120, 10), participant_ids=IDS, min_participants=3
        )
    assert "in memory" in caplog.text
    with pytest.raises(ModeSetupInvalid, match="registry_path"):
        SecureDeployment.create(
            mode="shares",
            shape=(120, 10),
            participant_ids=IDS,
            min_participants=3,
            registry_path="",
        )


def test_range_material_is_dealt_only_for_signed_fresh_requests(tmp_path: Path) -> None:
    dep, sink, _, _, _, _, ranges = _round(tmp_path)
    assert len(ranges.seen) == len(IDS)  # one range check per upload
    for request in ranges.seen:
        head, _ = decode_frame(request, KEY_AUTHORITY_REQUEST)
        assert head["auth"]["purpose"] == "range"  # type: ignore[index]
    dealt = len(dep.authority.log)
    head, payload = decode_frame(ranges.seen[-1], KEY_AUTHORITY_REQUEST)
    bare = {k: v for k, v in head.items() if k not in ("auth", "signature")}
    with pytest.raises(ServerRequestReplayed):
        dep.authority.handle_deal_range(ranges.seen[-1], **_macs(dep))
    for request in (
        encode_frame(KEY_AUTHORITY_REQUEST, bare, payload),
        encode_frame(KEY_AUTHORITY_REQUEST, {**head, "count": 1}, payload),
        deal_request(
            round_id=1,
            tensor="x",
            count=1,
            signer=ServerSigningKey.generate("aggregator"),
            purpose="range",
        ),
    ):
        with pytest.raises(ServerRequestUnauthenticated):
            dep.authority.handle_deal_range(request, **_macs(dep))
    signed_triples = deal_request(
        round_id=1,
        tensor="t",
        count=1,
        signer=dep._signing_key,  # type: ignore[attr-defined]
    )
    with pytest.raises(AuthorityRequestMalformed, match="'range'"):
        dep.authority.handle_deal_range(signed_triples, **_macs(dep))  # a triple request
    assert len(dep.authority.log) == dealt


def test_an_aggregator_restarted_mid_round_reloads_its_uploads(tmp_path: Path) -> None:
    """Loads and range checks belong to no round: a fresh aggregator may send them again."""
    dep, _, _, _, helper_tap, uploads, _ = _round(tmp_path)
    fresh = SharesAggregator(
        shape=dep.shape,
        bound=BOUND,
        keys=dep.server_keys(),  # type: ignore[attr-defined]
        min_participants=3,
    )
    handle = fresh.load(uploads[0])  # tagged for round 0 after the helper served round 1
    assert handle.uid in dep.helper._seeds  # type: ignore[attr-defined]
    load = next(r for r in helper_tap.seen if decode_frame(r, HELPER_REQUEST)[0]["op"] == "load")
    with pytest.raises(ServerRequestReplayed):  # its nonce is still remembered
        dep.helper.handle(load)  # type: ignore[attr-defined]
