"""Guards of the gatekeepers' keys and policy that surviving mutants showed unchecked.

``scripts/mutation gatekeepers`` changed each of these and the selected tests
stayed green: a channel tag that ignores the message, a non-bytes channel key,
the refusal and pickling messages, the key fingerprint shown by ``repr``, the
central-DP flag of a release recorded without it, and an extra release rule
that does not observe releases.
"""

from __future__ import annotations

import copy
import pickle
import time
from dataclasses import replace

import pytest

from crypto.sm import SM2PrivateKey
from secure_fed.errors import (
    DecryptionRefused,
    ModeSetupInvalid,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.release_policy import ReleasePolicy, ReleaseRequest
from secure_fed.secure.server_auth import (
    ChannelKey,
    RequestVerifier,
    ServerSigningKey,
    authenticate_request,
)
from secure_fed.wire import HELPER_REQUEST

AGG = ReleaseRequest(
    round_id=2,
    purpose="aggregate",
    contributors=("a", "b", "c"),
    value_kind="aggregate",
    shape=(4, 3),
)


def test_a_channel_tag_covers_the_message() -> None:
    key = ChannelKey.generate("aggregator")
    tag = key.tag(b"open round 1")
    assert len(tag) == 32 and key.check(b"open round 1", tag)
    assert key.tag(b"open round 2") != tag
    assert not key.check(b"open round 2", tag)
    other = ChannelKey(name="aggregator", key=b"\x01" * 32)
    assert not other.check(b"open round 1", tag)  # the tag is the key's


@pytest.mark.parametrize("bad", ["k" * 40, bytearray(40), b"k" * 31, None])
def test_a_channel_key_is_at_least_32_bytes(bad: object) -> None:
    with pytest.raises(ModeSetupInvalid, match="a channel key must be at least 32 bytes"):
        ChannelKey(name="aggregator", key=bad)  # type: ignore[arg-type]


def test_server_keys_are_opaque() -> None:
    key = SM2PrivateKey.generate()
    signing = ServerSigningKey(name="aggregator", key=key)
    assert repr(signing) == (
        f"ServerSigningKey('aggregator', {key.public_key.fingerprint()[:12]}...)"
    )
    with pytest.raises(TypeError, match="ServerSigningKey cannot be pickled"):
        pickle.dumps(signing)
    channel = ChannelKey.generate("helper")
    assert repr(channel) == "ChannelKey('helper')"
    with pytest.raises(TypeError, match="ChannelKey cannot be pickled"):
        pickle.dumps(channel)
    for key, kind in ((signing, "ServerSigningKey"), (channel, "ChannelKey")):
        for clone in (copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=f"{kind} cannot be copied"):
                clone(key)


def test_a_release_without_central_dp_is_recorded_without_it() -> None:
    policy = ReleasePolicy(party="helper", min_participants=3, refusal=DecryptionRefused)
    policy.released(AGG)
    assert policy.log[-1].released and not policy.log[-1].central_dp


def test_extra_rules_need_not_observe_releases() -> None:
    seen: list[ReleaseRequest] = []

    def allow_all(request: ReleaseRequest) -> str | None:
        seen.append(request)
        return None

    policy = ReleasePolicy(
        party="key_authority", min_participants=3, refusal=DecryptionRefused, rules=(allow_all,)
    )
    policy.check(AGG)
    policy.released(AGG)  # a rule without observe() is simply not told
    assert seen == [AGG] and policy.log[-1].released


def test_a_release_event_states_what_was_released() -> None:
    sink = MemoryAuditSink()
    policy = ReleasePolicy(
        party="helper", min_participants=3, refusal=DecryptionRefused, audit=sink
    )
    policy.released(replace(AGG, weights=(0.5, 0.25, 0.25)), central_dp=True)
    (event,) = sink.named("decryption.released")
    assert {k: v for k, v in event.items() if k != "at"} == {
        "party": "helper",
        "round_id": 2,
        "purpose": "aggregate",
        "contributors": 3,
        "shape": [4, 3],
        "central_dp": True,
        "weights": [0.5, 0.25, 0.25],
        "participant_ids": ["a", "b", "c"],
    }


def test_a_refusal_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    policy = ReleasePolicy(party="helper", min_participants=3, refusal=DecryptionRefused)
    with (
        caplog.at_level("WARNING", logger="secure_fed.secure.release_policy"),
        pytest.raises(DecryptionRefused),
    ):
        policy.check(replace(AGG, contributors=("a", "b")))
    assert caplog.messages == [
        "helper refused aggregate of round 2: aggregate over 2 distinct participants; "
        "at least 3 needed"
    ]
    assert policy.log[-1].kind == "refused" and not policy.log[-1].central_dp


def test_a_log_row_keeps_round_time_and_weights() -> None:
    policy = ReleasePolicy(party="helper", min_participants=3, refusal=DecryptionRefused)
    before = time.time()
    policy.released(replace(AGG, weights=(0.5, 0.25, 0.25)))
    row = policy.log[-1]
    assert (row.round_id, row.purpose, row.weights) == (2, "aggregate", (0.5, 0.25, 0.25))
    assert before <= row.at <= time.time()


def test_server_key_and_verifier_arguments_are_typed() -> None:
    with pytest.raises(ModeSetupInvalid, match="key must be an SM2PrivateKey"):
        ServerSigningKey(name="aggregator", key=b"k" * 32)  # type: ignore[arg-type]
    with pytest.raises(ModeSetupInvalid, match="sender must be a ServerIdentity or a ChannelKey"):
        RequestVerifier(HELPER_REQUEST, "aggregator")  # type: ignore[arg-type]


def test_a_round_serves_at_most_max_nonces_requests() -> None:
    key = ChannelKey.generate("aggregator")
    verifier = RequestVerifier(HELPER_REQUEST, key, max_nonces=2)

    def request() -> bytes:
        return authenticate_request(
            HELPER_REQUEST, {"op": "x"}, signer=key, round_id=1, purpose="x"
        )

    verifier.verify(request())
    verifier.verify(request())
    with pytest.raises(ServerRequestReplayed, match="round 1 exceeded 2 requests"):
        verifier.verify(request())


def test_a_wrong_tag_or_signature_is_named() -> None:
    key = ChannelKey.generate("aggregator")
    forged = authenticate_request(
        HELPER_REQUEST,
        {"op": "x"},
        signer=ChannelKey(name="aggregator", key=b"\x02" * 32),
        round_id=1,
        purpose="x",
    )
    with pytest.raises(ServerRequestUnauthenticated, match="the request's HMAC-SM3 tag is wrong"):
        RequestVerifier(HELPER_REQUEST, key).verify(forged)
    signer, stranger = (
        ServerSigningKey.generate("aggregator"),
        ServerSigningKey.generate("aggregator"),
    )
    signed = authenticate_request(
        HELPER_REQUEST, {"op": "x"}, signer=stranger, round_id=1, purpose="x"
    )
    with pytest.raises(ServerRequestUnauthenticated, match="the request's SM2 signature is wrong"):
        RequestVerifier(HELPER_REQUEST, signer.identity).verify(signed)
