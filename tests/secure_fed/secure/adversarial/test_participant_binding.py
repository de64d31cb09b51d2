"""A malicious participant against the envelope binding, with the project's own classes.

* a shares payload captured from another participant, wrapped in the
  attacker's own signed upload, is refused at the boundary (before it crashed
  the round's filter);
* a CKKS ciphertext captured from another participant cannot be resubmitted as
  the attacker's own (the payload names nobody, so the digest is what binds);
* an unknown sender and a bad signature are refused identically, so the
  refusals do not reveal which participant ids are registered.
"""

from __future__ import annotations

import secrets
import struct

import pytest

from crypto.sm import SM2PrivateKey, sm3_digest
from secure_fed.errors import (
    UploadBindingInvalid,
    UploadPayloadReused,
    UploadSignatureInvalid,
)
from secure_fed.federation.messages import UploadHeader, encode_upload
from secure_fed.wire import ENVELOPE, decode_frame, encode_frame, encode_header
from tests.secure_fed.secure.adversarial.binding import IDS, C, N, as_own, harness, inner_upload
from tests.secure_fed.secure.helpers import population


def test_a_captured_share_payload_is_refused_before_the_helper_sees_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h, sink = harness("shares", tmp_path)
    preds = population(3, N, C, seed=1)
    _, stolen = inner_upload(h.envelope("a", preds["p00"], 1))  # captured in transit
    with pytest.raises(UploadBindingInvalid, match="another participant"):
        h.verifier.accept(as_own(h, "b", stolen), round_id=1)
    assert sink.named("upload.rejected")[-1]["code"] == "UPLOAD_BINDING_INVALID"
    # the engine itself refuses it too (a caller that skips the envelope gate)
    header = UploadHeader(
        round_id=1,
        participant_id="b",
        mode="shares",
        schema=h.model,
        schema_hash=h.round_schema.schema_hash(),
        num_samples=1,
        nonce=secrets.token_hex(16),
        payload_sm3=sm3_digest(stolen).hex(),
    )
    with pytest.raises(UploadBindingInvalid, match="payload names participant 'a'"):
        h.engine.submit(encode_upload(header, stolen), round_id=1)
    # the round is untouched: the owner's own upload of it and the others go through
    for pid, key in zip(IDS, preds, strict=True):
        h.verifier.accept(h.envelope(pid, preds[key], 1), round_id=1)
    h.engine.close(1)
    h.engine.filter(1)  # before the fix: AggregationInvalid here
    h.engine.publish(1)
    assert sorted(h.engine.state(1).weights) == IDS


def test_the_signed_upload_id_must_be_the_payloads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h, sink = harness("shares", tmp_path)
    env = h.envelope("a", population(1, N, C)["p00"], 1)
    head, body = decode_frame(env, ENVELOPE)
    (sig_len,) = struct.unpack(">H", body[:2])
    upload = body[2 + sig_len :]
    head = {**head, "upload_id": "0" * 16}  # re-signed by a itself: the signature is fine
    sig = h.keys["a"].sign(sm3_digest(encode_header(ENVELOPE, head)) + sm3_digest(upload))
    forged = encode_frame(ENVELOPE, head, struct.pack(">H", len(sig)) + sig + upload)
    with pytest.raises(UploadBindingInvalid, match="upload id"):
        h.verifier.accept(forged, round_id=1)
    assert h.engine.state(1).uploads == {}


def test_a_ckks_upload_cannot_be_resubmitted_as_anothers_own(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h, sink = harness("ckks", tmp_path)
    preds = population(3, N, C, seed=2)
    env_a = h.envelope("a", preds["p00"], 1)
    assert h.verifier.accept(env_a, round_id=1) == "a"
    _, ciphertext = inner_upload(env_a)
    with pytest.raises(UploadPayloadReused, match="already accepted"):
        h.verifier.accept(as_own(h, "b", ciphertext), round_id=1)
    assert sink.named("upload.rejected")[-1]["code"] == "UPLOAD_PAYLOAD_REUSED"
    assert sorted(h.engine.state(1).uploads) == ["a"]
    assert h.verifier.accept(h.envelope("b", preds["p01"], 1), round_id=1) == "b"


def test_unknown_sender_and_bad_signature_are_indistinguishable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    h, sink = harness("plaintext", tmp_path)
    matrix = population(1, N, C)["p00"]
    # an unregistered id, signed with a key of its own
    stranger = "zz-not-registered"
    h.keys[stranger] = SM2PrivateKey.generate()
    h.encoders[stranger] = h.encoders["a"]
    unknown = h.envelope(stranger, matrix, 1)
    # a registered id, signed with the wrong key
    h.keys["a"], real = SM2PrivateKey.generate(), h.keys["a"]
    forged = h.envelope("a", matrix, 1)
    h.keys["a"] = real
    errors = []
    for env in (unknown, forged):
        with pytest.raises(UploadSignatureInvalid) as info:
            h.verifier.accept(env, round_id=1)
        errors.append(info.value)
    assert errors[0].code == errors[1].code and errors[0].message == errors[1].message
    assert stranger not in errors[0].message and "'a'" not in errors[1].message
    events = sink.named("upload.rejected")[-2:]
    assert events[0]["code"] == events[1]["code"] and events[0]["reason"] == events[1]["reason"]
