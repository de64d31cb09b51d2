from __future__ import annotations

import struct

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
from secure_fed.wire import PUBLICATION, encode_frame, encode_matrix
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


def test_upload_header_bytes_are_canonical_and_version_2() -> None:
    msg = make_upload("a", honest(0))
    assert msg[:5] == b"SFUP\x02"
    head_len = struct.unpack(">I", msg[5:9])[0]
    head = msg[9 : 9 + head_len]
    assert b'"bound":"8.0"' in head and b" " not in head  # no float literal, no whitespace
    with pytest.raises(UploadMalformed, match="version 1 is not supported"):
        decode_upload(msg[:4] + b"\x01" + msg[5:], max_bytes=10**6)
    spaced = head.replace(b'"round_id":', b'"round_id": ')  # same JSON, not canonical
    bad = msg[:5] + struct.pack(">I", len(spaced)) + spaced + msg[9 + head_len :]
    with pytest.raises(UploadMalformed, match="canonical"):
        decode_upload(bad, max_bytes=10**6)


def test_publication_weights_travel_exactly() -> None:
    weights = {"a": 0.1, "b": 0.1 + 0.2, "c": 1 / 3}
    data = encode_publication(Publication(round_id=1, aggregate=honest(0), weights=weights))
    assert b'"a":"0.1"' in data and b'"b":"0.30000000000000004"' in data
    back = decode_publication(data, max_bytes=10**6)
    assert back.weights == weights  # bit-exact, not rounded


@pytest.mark.parametrize("weights", [{"a": "x"}, {"a": True}, {"a": "1e-3"}])
def test_publication_weights_must_be_decimal_numbers(weights: dict[str, object]) -> None:
    header = {"round_id": 1, "weights": weights, "excluded": []}
    data = encode_frame(PUBLICATION, header, encode_matrix(honest(0)))
    with pytest.raises(UploadMalformed, match="weights must be numbers"):
        decode_publication(data, max_bytes=10**6)
