"""Server-to-server requests: unsigned, foreign-signed, altered and replayed ones are refused."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from crypto.ckks import pack_class_major
from secure_fed.errors import ReleaseRefused, ServerRequestReplayed, ServerRequestUnauthenticated
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.ckks_claims import evaluate
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.parties.key_authority import decryption_request
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import KEY_AUTHORITY_REQUEST, decode_frame, encode_frame
from tests.secure_fed.secure.helpers import population

N, C = 64, 4
IDS = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="ckks", shape=(N, C), participant_ids=IDS, min_participants=3, audit=sink
    )
    preds = population(4, N, C, seed=5)
    ups = {
        p: pack_class_major(dep.public_context, m) for p, m in zip(IDS, preds.values(), strict=True)
    }
    return dep, sink, ups


def _served(dep, request: bytes) -> None:  # type: ignore[no-untyped-def]
    """Send ``request``; a refusal by the release plan is fine (authentication passed first)."""
    try:
        dep.authority.handle(request)
    except (ServerRequestReplayed, ServerRequestUnauthenticated):
        raise
    except ReleaseRefused:
        pass


def _mean_request(dep, ups, *, round_id: int, signer=None) -> bytes:  # type: ignore[no-untyped-def]
    ids = IDS[:3]
    claim = {"op": "mean", "uploads": [[p, "0" * 64] for p in ids]}
    matrix = evaluate(claim, ups, dep.public_context)
    return decryption_request(
        round_id=round_id,
        purpose="mean",
        participant_ids=ids,
        shape=(N, C),
        ciphertext=matrix.to_bytes(),
        signer=signer or dep.server_keys().signer,
        claim=claim,
    )


def test_a_signed_request_is_served(setup) -> None:  # type: ignore[no-untyped-def]
    dep, sink, ups = setup
    _served(dep, _mean_request(dep, ups, round_id=1))
    event = sink.named("decryption.requested")[-1]  # logged before any release decision
    assert event["signer"] == "aggregator" and len(event["request_sm3"]) == 64
    assert dep.authority.requests[-1].request_sm3 == event["request_sm3"]


def test_unsigned_request_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    dep, sink, ups = setup
    header, payload = decode_frame(_mean_request(dep, ups, round_id=2), KEY_AUTHORITY_REQUEST)
    del header["signature"]
    with pytest.raises(ServerRequestUnauthenticated, match="not signed"):
        dep.authority.handle(encode_frame(KEY_AUTHORITY_REQUEST, header, payload))
    assert sink.named("access.denied")[-1]["code"] == "SERVER_REQUEST_UNAUTHENTICATED"


def test_request_signed_by_another_key_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    dep, _, ups = setup
    impostor = ServerSigningKey.generate("aggregator")  # same name, not the enrolled key
    with pytest.raises(ServerRequestUnauthenticated, match="SM2 signature is wrong"):
        dep.authority.handle(_mean_request(dep, ups, round_id=2, signer=impostor))
    helper = ServerSigningKey.generate("helper")
    with pytest.raises(ServerRequestUnauthenticated, match="not the enrolled"):
        dep.authority.handle(_mean_request(dep, ups, round_id=2, signer=helper))


def test_altered_request_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    dep, _, ups = setup
    header, payload = decode_frame(_mean_request(dep, ups, round_id=2), KEY_AUTHORITY_REQUEST)
    header["participant_ids"] = ["a", "b", "d"]
    with pytest.raises(ServerRequestUnauthenticated):
        dep.authority.handle(encode_frame(KEY_AUTHORITY_REQUEST, header, payload))
    header, payload = decode_frame(_mean_request(dep, ups, round_id=2), KEY_AUTHORITY_REQUEST)
    swapped = bytearray(payload)
    swapped[-1] ^= 1
    with pytest.raises(ServerRequestUnauthenticated, match="payload"):
        dep.authority.handle(encode_frame(KEY_AUTHORITY_REQUEST, header, bytes(swapped)))


def test_replayed_nonce_and_older_round_are_refused(setup) -> None:  # type: ignore[no-untyped-def]
    dep, sink, ups = setup
    request = _mean_request(dep, ups, round_id=3)
    _served(dep, request)
    with pytest.raises(ServerRequestReplayed, match="nonce already used"):
        dep.authority.handle(request)
    _served(dep, _mean_request(dep, ups, round_id=4))
    with pytest.raises(ServerRequestReplayed, match="round 3 after round 4"):
        dep.authority.handle(_mean_request(dep, ups, round_id=3))  # round r replayed in r+1
    assert sink.named("access.denied")[-1]["code"] == "SERVER_REQUEST_REPLAYED"


def test_server_keys_are_opaque() -> None:
    key = ServerSigningKey.generate("aggregator")
    with pytest.raises(TypeError):
        pickle.dumps(key)
    assert "aggregator" in repr(key) and "_key" not in repr(key)
    assert np.asarray(key.identity.public_key.to_der()).size > 0
