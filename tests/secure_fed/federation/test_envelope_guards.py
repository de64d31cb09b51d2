"""The envelope verifier's refusals at their exact boundaries, with their exact texts.

``scripts/mutation envelope`` changed each of these and the envelope's tests stayed
green (docs/benchmarks.md, "Mutation testing", fourth run). The envelopes below
are signed correctly by the sender's registered SM2 key around a real plaintext
upload, so each reaches the one check it breaks: the size limit (exactly at it is
served), a payload too short for the signature length, a signature length beyond
80 bytes or beyond the payload, a head whose size, digest, parameters, round,
sender or mode differ from the upload, and a missing or unreadable budget receipt.
"""

from __future__ import annotations

import logging
import re
import struct

import pytest

from crypto.sm import SM2PrivateKey, sm3_digest
from privacy_ledger.budget.receipts import ReceiptVerifier
from secure_fed.errors import (
    UploadMalformed,
    UploadReceiptInvalid,
    UploadReceiptMissing,
    UploadSignatureInvalid,
)
from secure_fed.federation.envelope import (
    plan_from_wire,
    plan_to_wire,
    seal_upload,
)
from secure_fed.wire import ENVELOPE, decode_frame, encode_frame
from tests.secure_fed.federation.envelopes import (
    KEYS,
    PLAN,
    UPLOAD,
    Gate,
    envelope_head,
    signed_envelope,
)
from tests.secure_fed.federation.helpers import honest, make_upload


def _refused(gate: Gate, envelope: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=rf"^\[[A-Z_]+\] {message}$"):
        gate.verifier.accept(envelope, round_id=3)  # type: ignore[arg-type]
    assert gate.submitted == []


def test_an_honest_envelope_is_submitted_with_the_callers_round() -> None:
    gate = Gate()
    envelope = seal_upload(UPLOAD, key=KEYS["a"], params="float32")
    assert gate.verifier.accept(envelope, round_id=3) == "submitted-3"
    assert gate.submitted == [(UPLOAD, 3)]
    assert gate.verifier.accept(signed_envelope(envelope_head()), round_id=4) == "submitted-4"


def test_an_envelope_of_exactly_max_bytes_is_served_and_one_byte_more_is_not() -> None:
    envelope = seal_upload(UPLOAD, key=KEYS["a"], params="float32")
    assert Gate(max_bytes=len(envelope)).verifier.accept(envelope, round_id=3)
    limit = len(envelope) - 1
    _refused(
        Gate(max_bytes=limit),
        envelope,
        UploadMalformed,
        f"envelope must be bytes of at most {limit} bytes",
    )
    _refused(
        Gate(),
        bytearray(envelope),
        UploadMalformed,
        "envelope must be bytes of at most 1048576 bytes",
    )


def test_a_payload_shorter_than_the_signature_length_is_refused() -> None:
    fields = envelope_head()
    for payload in (b"", b"\x00"):
        _refused(
            Gate(),
            encode_frame(ENVELOPE, fields, payload),
            UploadSignatureInvalid,
            "envelope is truncated before the signature length",
        )
    # two bytes hold a (zero) length: the empty signature then fails to verify
    _refused(
        Gate(),
        encode_frame(ENVELOPE, fields, b"\x00\x00"),
        UploadSignatureInvalid,
        "envelope signature does not verify under the sender's registered key",
    )


@pytest.mark.parametrize("sig_len", [81, 200, 65535])
def test_a_signature_longer_than_80_bytes_is_refused(sig_len: int) -> None:
    payload = struct.pack(">H", sig_len) + bytes(sig_len) + UPLOAD
    _refused(
        Gate(),
        encode_frame(ENVELOPE, envelope_head(), payload),
        UploadSignatureInvalid,
        f"envelope signature length {sig_len} is out of range",
    )


def test_a_signature_length_is_checked_against_the_payload() -> None:
    fields = envelope_head()
    # 80 bytes is in range: the bytes are read as a signature, which does not verify
    _refused(
        Gate(),
        encode_frame(ENVELOPE, fields, struct.pack(">H", 80) + bytes(80) + UPLOAD),
        UploadSignatureInvalid,
        "envelope signature does not verify under the sender's registered key",
    )
    # a length running exactly to the payload's end is in range; one byte beyond is not
    _refused(
        Gate(),
        encode_frame(ENVELOPE, fields, struct.pack(">H", 40) + bytes(40)),
        UploadSignatureInvalid,
        "envelope signature does not verify under the sender's registered key",
    )
    _refused(
        Gate(),
        encode_frame(ENVELOPE, fields, struct.pack(">H", 40) + bytes(39)),
        UploadSignatureInvalid,
        "envelope signature length 40 is out of range",
    )


def test_a_signature_by_another_registered_sender_or_for_an_unknown_one_is_refused() -> None:
    message = "envelope signature does not verify under the sender's registered key"
    _refused(Gate(), signed_envelope(envelope_head(), signer="b"), UploadSignatureInvalid, message)
    _refused(
        Gate(), signed_envelope(envelope_head(participant_id="zz")), UploadSignatureInvalid, message
    )
    _refused(
        Gate(), signed_envelope(envelope_head(participant_id=7)), UploadSignatureInvalid, message
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"upload_bytes": len(UPLOAD) + 1}, "envelope size or digest does not match the upload"),
        ({"upload_bytes": str(len(UPLOAD))}, "envelope size or digest does not match the upload"),
        (
            {"upload_sm3": sm3_digest(b"x").hex()},
            "envelope size or digest does not match the upload",
        ),
        ({"params": "ckks-128"}, "envelope params 'ckks-128' are not 'float32'"),
        ({"round_id": 4}, "envelope round_id differs from the upload header"),
        ({"mode": "shares"}, "envelope mode differs from the upload header"),
    ],
)
def test_a_head_that_differs_from_its_upload_is_refused(
    changes: dict[str, object], message: str
) -> None:
    _refused(Gate(), signed_envelope(envelope_head(**changes)), UploadMalformed, message)


def test_the_envelopes_sender_must_be_the_uploads() -> None:
    other = make_upload("b", honest(2), round_id=3)
    fields = envelope_head(upload_bytes=len(other), upload_sm3=sm3_digest(other).hex())
    _refused(
        Gate(),
        signed_envelope(fields, other),
        UploadMalformed,
        "envelope participant_id differs from the upload header",
    )


def test_a_refusal_is_audited_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    gate = Gate()
    envelope = signed_envelope(envelope_head(params="ckks-128"))
    with caplog.at_level(logging.WARNING, logger="secure_fed.federation.envelope"):
        with pytest.raises(UploadMalformed):
            gate.verifier.accept(envelope, round_id=3)
    (event,) = gate.sink.named("upload.rejected")
    assert event == {
        "round_id": 3,
        "code": "UPLOAD_MALFORMED",
        "reason": "envelope params 'ckks-128' are not 'float32'",
        "bytes": len(envelope),
    }
    assert [r.getMessage() for r in caplog.records] == [
        "upload rejected: [UPLOAD_MALFORMED] envelope params 'ckks-128' are not 'float32'"
    ]


def test_without_a_receipt_verifier_no_receipt_is_needed_and_with_one_it_is() -> None:
    assert Gate().verifier.accept(signed_envelope(envelope_head(receipt=None)), round_id=3)
    gate = Gate(receipts=ReceiptVerifier(public_key=SM2PrivateKey.generate().public_key))
    _refused(
        gate,
        signed_envelope(envelope_head(receipt=None)),
        UploadReceiptMissing,
        "participant 'a' sent no budget receipt for round 3: no committed reservation, no upload",
    )
    for raw in ("zz", 5, "00"):
        with pytest.raises(
            UploadReceiptInvalid, match=r"^\[UPLOAD_RECEIPT_INVALID\] budget receipt refused: "
        ):
            gate.verifier.accept(
                signed_envelope(envelope_head(receipt=raw, dp_plan=plan_to_wire(PLAN))), round_id=3
            )
    assert gate.submitted == []


def test_a_dp_plan_travels_exactly_and_a_malformed_one_is_named() -> None:
    assert plan_to_wire(PLAN) == {
        "noise_multiplier": 1.1,
        "sample_rate": 0.01,
        "steps": 300,
        "delta": 1e-5,
    }
    assert plan_to_wire(None) is None
    head, _ = decode_frame(seal_upload(UPLOAD, key=KEYS["a"], params="f", plan=PLAN), ENVELOPE)
    wire = head["dp_plan"]
    assert isinstance(wire, dict)
    assert plan_from_wire(wire) == PLAN
    zero = plan_from_wire({**wire, "noise_multiplier": "0", "sample_rate": 0, "delta": "0.0"})
    assert (zero.noise_multiplier, zero.sample_rate, zero.delta) == (0.0, 0.0, 0.0)
    fields = "envelope dp_plan must name exactly the receipt's plan fields"
    numbers = "envelope dp_plan fields must be numbers"
    for bad, message in (
        (None, fields),
        ([1, 2], fields),
        ({**wire, "extra": 1}, fields),
        ({k: v for k, v in wire.items() if k != "steps"}, fields),
        ({**wire, "steps": True}, numbers),
        ({**wire, "steps": "300"}, numbers),
        ({**wire, "noise_multiplier": "x"}, numbers),
        ({**wire, "delta": "x"}, numbers),
        ({**wire, "sample_rate": None}, numbers),
    ):
        with pytest.raises(
            UploadReceiptInvalid, match=rf"^\[UPLOAD_RECEIPT_INVALID\] {re.escape(message)}$"
        ):
            plan_from_wire(bad)
