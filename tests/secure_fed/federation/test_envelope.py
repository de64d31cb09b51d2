from __future__ import annotations

import json
import struct

import pytest

from crypto.sm import sm3_digest
from secure_fed.errors import (
    SecureFedError,
    UploadMalformed,
    UploadReplayed,
    UploadSignatureInvalid,
)
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.wire import ENVELOPE, decode_frame
from tests.secure_fed.secure.helpers import Harness, population

N, C = 40, 4
IDS = ["a", "b", "c"]


@pytest.fixture
def harness(tmp_path):  # type: ignore[no-untyped-def]
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="shares", shape=(N, C), participant_ids=IDS, min_participants=2, audit=sink
    )
    h = Harness(dep, tmp_path, ids=IDS, min_participants=2, audit=sink)
    h.engine.open(h.config(1))
    h.engine.start_collecting(1)
    h.sink = sink
    return h


def _flip(data: bytes, pos: int) -> bytes:
    out = bytearray(data)
    out[pos] ^= 1
    return bytes(out)


def test_valid_envelope_is_accepted(harness) -> None:  # type: ignore[no-untyped-def]
    env = harness.envelope("a", population(1, N, C)["p00"], 1)
    assert harness.verifier.accept(env, round_id=1) == "a"
    assert "a" in harness.engine.state(1).uploads


def _head_len(env: bytes) -> int:
    return struct.unpack(">I", env[5:9])[0]


def _sig_at(env: bytes) -> int:
    """Offset of the signature length: magic, version, header length, header, payload length."""
    return 9 + _head_len(env) + 8


@pytest.mark.parametrize(
    "case,error,fragment",
    [
        ("oversize", UploadMalformed, "at most"),
        ("magic", UploadMalformed, "SFSE"),
        ("signature", UploadSignatureInvalid, "does not verify"),
        ("payload", UploadSignatureInvalid, "does not verify"),
        ("sig_len", UploadSignatureInvalid, "length"),
        ("unknown", UploadSignatureInvalid, "does not verify"),  # as a bad signature
    ],
)
def test_each_rejection_is_typed_and_audited(harness, case, error, fragment) -> None:  # type: ignore[no-untyped-def]
    env = harness.envelope("a", population(1, N, C)["p00"], 1)
    at = _sig_at(env)
    if case == "oversize":
        harness.verifier.max_bytes = len(env) - 1
    elif case == "magic":
        env = b"XXXX" + env[4:]
    elif case == "signature":
        env = _flip(env, at + 2 + 20)
    elif case == "payload":
        env = _flip(env, len(env) - 3)  # the signature covers the upload digest
    elif case == "sig_len":
        env = env[:at] + struct.pack(">H", 999) + env[at + 2 :]
    elif case == "unknown":
        del harness.verifier.keys["a"]
    with pytest.raises(error, match=fragment):
        harness.verifier.accept(env, round_id=1)
    rejected = harness.sink.named("upload.rejected")
    assert rejected and rejected[-1]["code"] == error.code
    assert harness.engine.state(1).uploads == {}


def test_replay_is_caught_after_the_signature(harness) -> None:  # type: ignore[no-untyped-def]
    env = harness.envelope("a", population(1, N, C)["p00"], 1)
    harness.verifier.accept(env, round_id=1)
    with pytest.raises(UploadReplayed):
        harness.verifier.accept(env, round_id=1)
    assert harness.sink.named("upload.rejected")[-1]["code"] == UploadReplayed.code


def test_params_mismatch_is_refused(harness) -> None:  # type: ignore[no-untyped-def]
    harness.verifier.params = "CKKS_SCORING"
    with pytest.raises(UploadMalformed, match="params"):
        harness.verifier.accept(harness.envelope("b", population(1, N, C)["p00"], 1), round_id=1)


def test_a_rejected_upload_does_not_disturb_the_round(harness) -> None:  # type: ignore[no-untyped-def]
    preds = population(3, N, C)
    bad = _flip(harness.envelope("a", preds["p00"], 1), 40)
    with pytest.raises(SecureFedError):
        harness.verifier.accept(bad, round_id=1)
    for pid, key in zip(IDS, preds, strict=True):
        harness.verifier.accept(harness.envelope(pid, preds[key], 1), round_id=1)
    harness.engine.close(1)
    harness.engine.filter(1)
    harness.engine.publish(1)
    assert harness.engine.state(1).stage.value == "published"


def test_a_signed_but_non_canonical_header_is_refused(harness) -> None:  # type: ignore[no-untyped-def]
    """The signed header bytes are the canonical ones: a re-spelled header fails before the key."""
    env = harness.envelope("a", population(1, N, C)["p00"], 1)
    head, payload = decode_frame(env, ENVELOPE)
    upload = payload[2 + struct.unpack(">H", payload[:2])[0] :]
    spelled = json.dumps(head, sort_keys=True).encode()  # ", " and ": " separators
    sig = harness.keys["a"].sign(sm3_digest(spelled) + sm3_digest(upload))
    body = struct.pack(">H", len(sig)) + sig + upload
    forged = b"SFSE\x02" + struct.pack(">I", len(spelled)) + spelled
    forged += struct.pack(">Q", len(body)) + body
    with pytest.raises(UploadMalformed, match="canonical"):
        harness.verifier.accept(forged, round_id=1)
    assert harness.engine.state(1).uploads == {}
