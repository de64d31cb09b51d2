"""The envelope's binding and receipt refusals, matched in full: what surviving mutants showed.

``scripts/mutation envelope`` changed these texts and the envelope's tests stayed
green (docs/benchmarks.md, "Mutation testing", sixth run): they matched a fragment.
A shares payload captured from another participant and sealed in the thief's own
envelope, a payload whose upload id is not the one its owner signed, and a receipt
that is not a hex string are each refused with their exact code and text, which the
``upload.rejected`` audit event repeats.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from crypto.sm import SM2PrivateKey, sm3_digest
from privacy_ledger.budget.receipts import ReceiptVerifier
from secure_fed.errors import UploadBindingInvalid, UploadReceiptInvalid, UploadSignatureInvalid
from secure_fed.federation.envelope import plan_to_wire
from secure_fed.wire import ENVELOPE, decode_frame, encode_frame, encode_header
from tests.secure_fed.federation.envelopes import PLAN, Gate, envelope_head, signed_envelope
from tests.secure_fed.secure.adversarial.binding import C, N, as_own, harness, inner_upload
from tests.secure_fed.secure.helpers import population


def _binding_refused(h: object, envelope: bytes, text: str, sink: object) -> None:
    with pytest.raises(
        UploadBindingInvalid, match=rf"^\[UPLOAD_BINDING_INVALID\] {re.escape(text)}$"
    ):
        h.verifier.accept(envelope, round_id=1)  # type: ignore[attr-defined]
    (event,) = sink.named("upload.rejected")  # type: ignore[attr-defined]
    assert (event["code"], event["reason"]) == ("UPLOAD_BINDING_INVALID", text)
    assert h.engine.state(1).uploads == {}  # type: ignore[attr-defined]


def test_a_captured_share_payload_in_the_thiefs_envelope_is_refused_by_name(
    tmp_path: Path,
) -> None:
    h, sink = harness("shares", tmp_path)
    _, stolen = inner_upload(h.envelope("a", population(1, N, C, seed=1)["p00"], 1))
    text = "the payload names another participant than its envelope"
    _binding_refused(h, as_own(h, "b", stolen), text, sink)


def test_an_upload_id_its_owner_did_not_sign_is_refused_by_name(tmp_path: Path) -> None:
    h, sink = harness("shares", tmp_path)
    head, body = decode_frame(h.envelope("a", population(1, N, C)["p00"], 1), ENVELOPE)
    (sig_len,) = struct.unpack(">H", body[:2])
    upload = body[2 + sig_len :]
    head = {**head, "upload_id": "0" * 16}  # re-signed by a itself: the signature is fine
    sig = h.keys["a"].sign(sm3_digest(encode_header(ENVELOPE, head)) + sm3_digest(upload))
    forged = encode_frame(ENVELOPE, head, struct.pack(">H", len(sig)) + sig + upload)
    _binding_refused(h, forged, "the payload's upload id differs from its envelope's", sink)


@pytest.mark.parametrize("raw", [5, ["00"]])
def test_a_receipt_that_is_not_a_hex_string_is_refused_as_no_bytes(raw: object) -> None:
    gate = Gate(receipts=ReceiptVerifier(public_key=SM2PrivateKey.generate().public_key))
    envelope = signed_envelope(envelope_head(receipt=raw, dp_plan=plan_to_wire(PLAN)))
    text = "budget receipt refused: [LEDGER_RECEIPT_INVALID] receipt is not bytes or is truncated"
    with pytest.raises(
        UploadReceiptInvalid, match=rf"^\[UPLOAD_RECEIPT_INVALID\] {re.escape(text)}$"
    ):
        gate.verifier.accept(envelope, round_id=3)
    assert gate.submitted == []


@pytest.mark.parametrize("pid", [["a"], {"id": "a"}])
def test_a_sender_id_that_is_no_string_is_refused_like_a_bad_signature(pid: object) -> None:
    gate = Gate()
    text = "envelope signature does not verify under the sender's registered key"
    with pytest.raises(
        UploadSignatureInvalid, match=rf"^\[UPLOAD_SIGNATURE_INVALID\] {re.escape(text)}$"
    ):
        gate.verifier.accept(signed_envelope(envelope_head(participant_id=pid)), round_id=3)
    assert gate.submitted == []
