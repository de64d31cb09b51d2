"""Fixing a round's release plan: only the enrolled aggregator can, and only once per request.

An attacker who reaches a gatekeeper (the key authority in CKKS mode, the helper in
shares mode) before the aggregator tries to fix a plan for a future round: unsigned,
signed with its own key, altered after signing, or a captured honest plan request
replayed. Each is refused with a typed error and an ``access.denied`` event, and the
gatekeeper holds no plan for that round afterwards.
"""

from __future__ import annotations

import pytest

from secure_fed.errors import ServerRequestReplayed, ServerRequestUnauthenticated
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.inprocess.ckks import CkksDeployment
from secure_fed.secure.inprocess.shares import SharesDeployment
from secure_fed.secure.parties import helper as helper_party
from secure_fed.secure.parties import key_authority
from secure_fed.secure.server_auth import ChannelKey, ServerSigningKey
from secure_fed.wire import (
    HELPER_REQUEST,
    KEY_AUTHORITY_REQUEST,
    MessageKind,
    decode_frame,
    encode_frame,
)
from tests.secure_fed.secure.helpers import BOUND, plan, population, publication_only

N, C = 32, 3
IDS = ["p00", "p01", "p02", "p03"]


def _deploy(mode: str) -> tuple[SecureDeployment, MemoryAuditSink]:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode=mode,
        shape=(N, C),
        participant_ids=IDS,
        min_participants=3,
        policy=publication_only(IDS, (N, C), quorum=3),
        audit=sink,
    )
    return dep, sink


Ckks = tuple[CkksDeployment, MemoryAuditSink]
Shares = tuple[SharesDeployment, MemoryAuditSink]


@pytest.fixture(scope="module")
def ckks() -> Ckks:
    dep, sink = _deploy("ckks")
    assert isinstance(dep, CkksDeployment)
    return dep, sink


@pytest.fixture
def shares() -> Shares:
    dep, sink = _deploy("shares")
    assert isinstance(dep, SharesDeployment)
    return dep, sink


def _ka_install(dep: CkksDeployment, request: bytes) -> bytes:
    return dep.authority.install_plan(request)


def _ka_request(
    dep: CkksDeployment, round_id: int, signer: ServerSigningKey | None = None
) -> bytes:
    key = signer or dep.server_keys().signer
    return key_authority.plan_request(plan(round_id, (N, C), scored=False), signer=key)


def _helper_request(dep: SharesDeployment, round_id: int, key: ChannelKey | None = None) -> bytes:
    key = key or dep.server_keys().request_key
    assert key is not None
    return helper_party.plan_request(plan(round_id, (N, C), scored=False), key=key)


def _altered(request: bytes, kind: MessageKind, **changes: object) -> bytes:
    header, payload = decode_frame(request, kind)
    header.update(changes)
    return encode_frame(kind, header, payload)


def _unsigned(request: bytes, kind: MessageKind) -> bytes:
    header, payload = decode_frame(request, kind)
    del header["signature"], header["auth"]
    return encode_frame(kind, header, payload)


def _denied(sink: MemoryAuditSink, party: str, code: str) -> None:
    event = sink.named("access.denied")[-1]
    assert (event["party"], event["op"], event["code"]) == (party, "plan", code)


# -- key authority (CKKS): SM2 signature of the enrolled aggregator ------------------


def test_ka_refuses_an_unsigned_plan(ckks: Ckks) -> None:
    dep, sink = ckks
    with pytest.raises(ServerRequestUnauthenticated, match="not signed"):
        _ka_install(dep, _unsigned(_ka_request(dep, 101), KEY_AUTHORITY_REQUEST))
    _denied(sink, "key_authority", "SERVER_REQUEST_UNAUTHENTICATED")
    assert dep.authority.plans.tracker(101) is None


def test_ka_refuses_a_plan_signed_by_another_key(ckks: Ckks) -> None:
    dep, sink = ckks
    forger = ServerSigningKey.generate("aggregator")  # same name, not the enrolled key
    with pytest.raises(ServerRequestUnauthenticated, match="SM2 signature"):
        _ka_install(dep, _ka_request(dep, 102, signer=forger))
    _denied(sink, "key_authority", "SERVER_REQUEST_UNAUTHENTICATED")
    assert dep.authority.plans.tracker(102) is None


def test_ka_refuses_a_plan_moved_to_another_round(ckks: Ckks) -> None:
    dep, sink = ckks
    moved = _altered(_ka_request(dep, 103), KEY_AUTHORITY_REQUEST, round_id=104)
    with pytest.raises(ServerRequestUnauthenticated):
        _ka_install(dep, moved)
    _denied(sink, "key_authority", "SERVER_REQUEST_UNAUTHENTICATED")
    assert dep.authority.plans.tracker(104) is None


def test_ka_refuses_a_decryption_request_sent_as_a_plan(ckks: Ckks) -> None:
    dep, sink = ckks
    signer = dep.server_keys().signer
    other = key_authority.deal_request(round_id=105, tensor="t", count=1, signer=signer)
    with pytest.raises(ServerRequestUnauthenticated, match="not 'plan'"):
        _ka_install(dep, other)
    _denied(sink, "key_authority", "SERVER_REQUEST_UNAUTHENTICATED")


def test_ka_refuses_a_replayed_plan(ckks: Ckks) -> None:
    dep, sink = ckks
    captured = _ka_request(dep, 110)
    _ka_install(dep, captured)
    with pytest.raises(ServerRequestReplayed, match="nonce"):
        _ka_install(dep, captured)
    _denied(sink, "key_authority", "SERVER_REQUEST_REPLAYED")
    _ka_install(dep, _ka_request(dep, 111))
    with pytest.raises(ServerRequestReplayed, match="after round 111"):
        _ka_install(dep, _ka_request(dep, 109))  # older round: fresh nonce, still refused


def test_ckks_honest_round_fixes_its_plan_and_publishes(ckks: Ckks) -> None:
    dep, _ = ckks
    agg = dep.aggregator(bound=BOUND)
    preds = population(4, N, C, seed=9)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    agg.begin_round(plan(200, (N, C), scored=False))
    assert dep.authority.plans.tracker(200) is not None
    total = agg.weighted_sum(handles, dict.fromkeys(handles, 0.25))
    assert agg.reveal(total, round_id=200).shape == (N, C)


# -- helper (shares): HMAC-SM3 under the aggregator-helper request key ---------------


def test_helper_refuses_an_unsigned_plan(shares: Shares) -> None:
    dep, sink = shares
    with pytest.raises(ServerRequestUnauthenticated, match="not signed"):
        dep.helper.handle(_unsigned(_helper_request(dep, 1), HELPER_REQUEST))
    _denied(sink, "helper", "SERVER_REQUEST_UNAUTHENTICATED")
    assert dep.helper.plans.tracker(1) is None


def test_helper_refuses_a_plan_under_another_key(shares: Shares) -> None:
    dep, sink = shares
    forged = _helper_request(dep, 1, key=ChannelKey.generate("aggregator"))
    with pytest.raises(ServerRequestUnauthenticated, match="HMAC-SM3"):
        dep.helper.handle(forged)
    _denied(sink, "helper", "SERVER_REQUEST_UNAUTHENTICATED")
    assert dep.helper.plans.tracker(1) is None


def test_helper_without_a_request_key_fixes_no_plan(shares: Shares) -> None:
    dep, _ = shares
    from dataclasses import replace

    bare = replace(dep.helper, request_key=None, audit=None)
    with pytest.raises(ServerRequestUnauthenticated, match="no aggregator channel key"):
        bare.handle(_helper_request(dep, 1))


def test_helper_refuses_a_replayed_plan(shares: Shares) -> None:
    dep, sink = shares
    captured = _helper_request(dep, 3)
    dep.helper.handle(captured)
    with pytest.raises(ServerRequestReplayed, match="nonce"):
        dep.helper.handle(captured)
    _denied(sink, "helper", "SERVER_REQUEST_REPLAYED")
    with pytest.raises(ServerRequestReplayed, match="after round 3"):
        dep.helper.handle(_helper_request(dep, 2))
    assert dep.helper.plans.tracker(2) is None


def test_shares_honest_round_fixes_its_plan_and_publishes(shares: Shares) -> None:
    dep, _ = shares
    agg = dep.aggregator(bound=BOUND)
    preds = population(4, N, C, seed=9)
    handles = {p: agg.load(dep.encoder(p, bound=BOUND).encode(m)) for p, m in preds.items()}
    agg.begin_round(plan(1, (N, C), scored=False))
    assert dep.helper.plans.tracker(1) is not None
    total = agg.weighted_sum(handles, dict.fromkeys(handles, 0.25))
    assert agg.reveal(total, round_id=1).shape == (N, C)
