from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import UploadMalformed
from secure_fed.federation.messages import (
    Publication,
    UploadHeader,
    decode_publication,
    decode_upload,
    encode_publication,
    encode_upload,
)
from tests.secure_fed.federation.helpers import honest, make_upload


def test_upload_round_trip() -> None:
    msg = make_upload("hospital-1", honest(0), nonce="0f" * 16, num_samples=42)
    header, payload = decode_upload(msg, max_bytes=10**6)
    assert header.participant_id == "hospital-1" and header.num_samples == 42
    assert header.nonce == "0f" * 16 and payload.startswith(b"SFMX")
    assert encode_upload(header, payload) == msg  # canonical


def test_payload_digest_is_bound_to_header() -> None:
    header, payload = decode_upload(make_upload("a", honest(0)), max_bytes=10**6)
    with pytest.raises(UploadMalformed, match="payload_sm3"):
        encode_upload(header, payload + b"x")


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("round_id", -1, "round_id"),
        ("participant_id", "bad id", "participant_id"),
        ("nonce", "XYZ", "nonce"),
        ("num_samples", 0, "num_samples"),
        ("schema_hash", "00", "schema_hash"),
    ],
)
def test_header_fields_validated(field: str, value: object, fragment: str) -> None:
    header, _ = decode_upload(make_upload("a", honest(0)), max_bytes=10**6)
    raw = header.to_dict()
    raw[field] = value
    with pytest.raises(UploadMalformed, match=fragment):
        UploadHeader.from_dict(raw)


def test_header_json_defects() -> None:
    msg = make_upload("a", honest(0))
    with pytest.raises(UploadMalformed, match="over the limit"):
        decode_upload(msg, max_bytes=100)
    bad = msg[:9] + b"\xff" + msg[10:]
    with pytest.raises(UploadMalformed, match="JSON"):
        decode_upload(bad, max_bytes=10**6)
    with pytest.raises(UploadMalformed, match="must be bytes"):
        decode_upload("text", max_bytes=10**6)  # type: ignore[arg-type]
    header, _ = decode_upload(msg, max_bytes=10**6)
    raw = header.to_dict()
    raw["extra"] = 1
    with pytest.raises(UploadMalformed, match="exactly the keys"):
        UploadHeader.from_dict(raw)
    raw.pop("extra")
    raw["schema"] = {"model_id": "x"}
    with pytest.raises(UploadMalformed, match="schema is malformed"):
        UploadHeader.from_dict(raw)


def test_publication_round_trip_and_errors() -> None:
    pub = Publication(
        round_id=3, aggregate=honest(1), weights={"a": 0.75, "b": 0.25}, excluded=("c",)
    )
    data = encode_publication(pub)
    back = decode_publication(data, max_bytes=10**6, shape=honest(1).shape)
    assert back.round_id == 3 and back.weights == pub.weights and back.excluded == ("c",)
    np.testing.assert_array_equal(back.aggregate, honest(1))
    with pytest.raises(UploadMalformed, match="shape"):
        decode_publication(data, max_bytes=10**6, shape=(1, 1))
    with pytest.raises(UploadMalformed, match="SFPB"):
        decode_publication(b"SFUP" + data[4:], max_bytes=10**6)
