"""The envelope binds its signed round, sender and mode to the upload it carries.

Plaintext payloads (like CKKS ciphertexts) name nobody, so the comparison of
the signed envelope header with the inner upload header is the only thing that
stops a registered participant from filing an upload in another's name, for
another round, or as another mode. Each case signs a correct envelope with the
sender's own key; only the inner header lies.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from crypto.sm import sm3_digest
from secure_fed.errors import UploadMalformed
from secure_fed.federation.envelope import seal_upload
from secure_fed.federation.messages import encode_upload
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.wire import ENVELOPE, decode_frame, encode_frame, encode_header
from tests.secure_fed.secure.helpers import Harness, population

N, C = 40, 4
IDS = ["a", "b", "c"]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode="plaintext", shape=(N, C), participant_ids=IDS, min_participants=2, audit=sink
    )
    h = Harness(dep, tmp_path, ids=IDS, min_participants=2, audit=sink)
    h.engine.open(h.config(1))
    h.engine.start_collecting(1)
    h.sink = sink  # type: ignore[attr-defined]
    return h


def _lying(h: Harness, signer: str, **inner: object) -> bytes:
    """``signer``'s own signed envelope around an upload whose inner header differs by ``inner``."""
    payload = h.encoders[signer].encode(population(1, N, C)["p00"])
    header = h.upload_header(signer, payload)
    sealed = seal_upload(encode_upload(header, payload), key=h.keys[signer], params=h.params)
    fields, _ = decode_frame(sealed, ENVELOPE)  # the signer's true round, id and mode
    upload = encode_upload(replace(header, **inner), payload)  # type: ignore[arg-type]
    fields = {**fields, "upload_bytes": len(upload), "upload_sm3": sm3_digest(upload).hex()}
    sig = h.keys[signer].sign(sm3_digest(encode_header(ENVELOPE, fields)) + sm3_digest(upload))
    return encode_frame(ENVELOPE, fields, struct.pack(">H", len(sig)) + sig + upload)


def test_an_honest_resealed_envelope_is_accepted(harness: Harness) -> None:
    """The re-sealing below is faithful: with no lie, the envelope goes through."""
    assert harness.verifier.accept(_lying(harness, "b"), round_id=1) == "b"
    assert set(harness.engine.state(1).uploads) == {"b"}


@pytest.mark.parametrize(
    ("inner", "field"),
    [
        ({"participant_id": "a"}, "participant_id"),  # b files an upload in a's name
        ({"round_id": 2}, "round_id"),
        ({"mode": "ckks"}, "mode"),
    ],
)
def test_the_inner_header_must_match_the_signed_envelope(
    harness: Harness, inner: dict[str, object], field: str
) -> None:
    envelope = _lying(harness, "b", **inner)
    with pytest.raises(UploadMalformed, match=f"envelope {field} differs from the upload header"):
        harness.verifier.accept(envelope, round_id=1)
    assert harness.engine.state(1).uploads == {}  # nothing filed under anyone's name
    rejected = harness.sink.named("upload.rejected")  # type: ignore[attr-defined]
    assert [e["code"] for e in rejected] == [UploadMalformed.code]
