"""Envelopes signed by registered SM2 keys around a real plaintext upload, and a gate
that verifies them, for the envelope verifier's boundary and mutant tests."""

from __future__ import annotations

import struct
from typing import Any

from crypto.sm import SM2PrivateKey, sm3_digest
from privacy_ledger.budget.receipts import DPPlan, ReceiptVerifier
from secure_fed.federation.envelope import EnvelopeVerifier, seal_upload
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.wire import ENVELOPE, decode_frame, encode_frame, encode_header
from tests.secure_fed.federation.helpers import honest, make_upload

KEYS = {"a": SM2PrivateKey.generate(), "b": SM2PrivateKey.generate()}
UPLOAD = make_upload("a", honest(1), round_id=3)
PLAN = DPPlan(noise_multiplier=1.1, sample_rate=0.01, steps=300, delta=1e-5)


def envelope_head(**changes: Any) -> dict[str, object]:
    """The head of an honest envelope of ``UPLOAD``, with ``changes`` applied."""
    head, _ = decode_frame(seal_upload(UPLOAD, key=KEYS["a"], params="float32"), ENVELOPE)
    head.update(changes)
    return head


def signed_envelope(
    fields: dict[str, object], upload: bytes = UPLOAD, *, signer: str = "a"
) -> bytes:
    """An envelope around ``upload`` with head ``fields``, signed by ``signer``'s key."""
    message = sm3_digest(encode_header(ENVELOPE, fields)) + sm3_digest(upload)
    sig = KEYS[signer].sign(message)
    return encode_frame(ENVELOPE, fields, struct.pack(">H", len(sig)) + sig + upload)


class Gate:
    """An envelope verifier over ``KEYS`` that records what it submits and audits."""

    def __init__(self, *, max_bytes: int = 1 << 20, receipts: ReceiptVerifier | None = None):
        self.sink = MemoryAuditSink()
        self.submitted: list[tuple[bytes, int]] = []
        self.verifier = EnvelopeVerifier(
            keys={p: k.public_key for p, k in KEYS.items()},
            submit=self._submit,
            params="float32",
            max_bytes=max_bytes,
            audit=self.sink,
            receipts=receipts,
        )

    def _submit(self, upload: bytes, *, round_id: int) -> str:
        self.submitted.append((upload, round_id))
        return f"submitted-{round_id}"
