"""The one wire module: its table of message kinds, the frame codec, numbers, arrays, matrices."""

from __future__ import annotations

import math
import struct
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from secure_fed.errors import AuthorityRequestMalformed, ModeSetupInvalid, UploadMalformed
from secure_fed.wire import (
    HELPER_REQUEST,
    KEY_AUTHORITY_REQUEST,
    MESSAGE_KINDS,
    UPLOAD,
    MessageKind,
    decode_array,
    decode_frame,
    decode_matrix,
    encode_array,
    encode_frame,
    encode_matrix,
    kind_of,
    number_from_wire,
)

KINDS = list(MESSAGE_KINDS.values())


def test_the_table_has_one_row_per_magic() -> None:
    assert len({k.magic for k in KINDS}) == len(KINDS) >= 9
    for name, kind in MESSAGE_KINDS.items():
        assert kind.name == name and len(kind.magic) == 4 and kind.version == 2
        assert kind.error in (UploadMalformed, AuthorityRequestMalformed)
        assert 0 < kind.max_header < kind.max_bytes and kind.description
    assert kind_of(b"SFKR") is KEY_AUTHORITY_REQUEST
    with pytest.raises(ModeSetupInvalid, match="registered.*helper_request"):
        kind_of(b"TEST")


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_every_kind_round_trips(kind: MessageKind) -> None:
    header = {"round_id": 3, "ids": ["a", "b"], "flag": True, "none": None, "w": 0.25}
    frame = encode_frame(kind, header, b"payload")
    assert frame[:4] == kind.magic and frame[4] == 2
    assert decode_frame(frame, kind) == ({**header, "w": "0.25"}, b"payload")


def _frame(magic: bytes, head: bytes, payload: bytes = b"xyz", *, version: int = 2) -> bytes:
    return magic + struct.pack(">BI", version, len(head)) + head + struct.pack(">Q", 3) + payload


@pytest.mark.parametrize("kind", [UPLOAD, HELPER_REQUEST], ids=["participant", "server"])
@pytest.mark.parametrize(
    ("data", "limit", "fragment"),
    [
        ("text", None, "must be bytes"),
        (_frame(b"SFUP", b'{"a":1}'), 10, "over the limit"),
        (b"SFXX" + bytes(20), None, "does not start with"),
        (b"SF", None, "does not start with"),
        ("version 1", None, "version 1 is not supported"),
        ("unversioned", None, "version 0 is not supported"),
        ("long header", None, "header length"),
        ("spaces", None, "not in canonical form"),
        ("unsorted", None, "not in canonical form"),
        ("float", None, "float literal"),
        ("duplicate", None, "duplicate key"),
        ("list", None, "must be a JSON object"),
        ("short payload", None, "payload is 2 bytes, header says 3"),
    ],
)
def test_each_defect_raises_the_kinds_error(
    kind: MessageKind, data: object, limit: int | None, fragment: str
) -> None:
    heads = {
        "spaces": b'{"a": 1}',
        "unsorted": b'{"b":1,"a":2}',
        "float": b'{"a":1.5}',
        "duplicate": b'{"a":1,"a":2}',
        "list": b"[1]",
    }
    m = kind.magic
    if data in heads:
        data = _frame(m, heads[str(data)])
    elif data == "version 1":
        data = _frame(m, b'{"a":1}', version=1)
    elif data == "unversioned":  # the layout before version 2: magic | u32 header_len | ...
        data = m + struct.pack(">I", 7) + b'{"a":1}' + struct.pack(">Q", 3) + b"xyz"
    elif data == "long header":
        data = m + struct.pack(">BI", 2, 1000) + b'{"a":1}' + struct.pack(">Q", 0)
    elif data == "short payload":
        data = _frame(m, b'{"a":1}', b"xy")
    elif isinstance(data, bytes) and data.startswith(b"SFUP"):
        data = m + data[4:]
    with pytest.raises(kind.error, match=fragment):
        decode_frame(data, kind, max_bytes=limit)  # type: ignore[arg-type]


def test_encoding_refuses_what_decoding_would() -> None:
    with pytest.raises(AuthorityRequestMalformed, match="cannot be encoded"):
        encode_frame(HELPER_REQUEST, {"w": math.nan})
    with pytest.raises(UploadMalformed, match="cannot be encoded"):
        encode_frame(UPLOAD, {"shape": np.int64(3)})
    with pytest.raises(UploadMalformed, match="exceeds"):
        encode_frame(UPLOAD, {"pad": "x" * (UPLOAD.max_header + 1)})


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_travel_bit_exact_as_decimal_strings(value: float) -> None:
    if len(format(Decimal(repr(value)), "f")) > 100:  # beyond the canonical decimal limit
        with pytest.raises(AuthorityRequestMalformed, match="longer than 100"):
            encode_frame(KEY_AUTHORITY_REQUEST, {"v": value})
        return
    head, _ = decode_frame(encode_frame(KEY_AUTHORITY_REQUEST, {"v": value}), KEY_AUTHORITY_REQUEST)
    text = head["v"]
    assert isinstance(text, str) and "e" not in text.lower()
    back = number_from_wire(text)
    assert back is not None and struct.pack(">d", back) == struct.pack(">d", value)


@pytest.mark.parametrize("value", ["1e5", "nan", "inf", "01.5", " 1", "1.", ".5", True, None, 1.5])
def test_only_integers_and_plain_decimals_are_numbers(value: object) -> None:
    assert number_from_wire(value) is None
    assert number_from_wire("-0.125") == -0.125 and number_from_wire(7) == 7.0


def test_arrays_check_dtype_shape_and_length() -> None:
    for dtype, arr in (
        ("f8", np.arange(6.0)),
        ("u8", np.arange(6, dtype=np.uint64)),
        ("f4", np.arange(6, dtype=np.float32)),
    ):
        meta, raw = encode_array(arr.reshape(2, 3), dtype)
        np.testing.assert_array_equal(decode_array(meta, raw), arr.reshape(2, 3))
    meta, raw = encode_array(np.arange(6.0).reshape(2, 3))
    with pytest.raises(AuthorityRequestMalformed, match="does not match"):
        decode_array(meta, raw[:-8])
    with pytest.raises(UploadMalformed, match="dtype"):
        decode_array({"shape": [1], "dtype": "i8"}, b"12345678", error=UploadMalformed)
    with pytest.raises(AuthorityRequestMalformed, match="shape is invalid"):
        decode_array({"shape": [True, 1], "dtype": "f8"}, b"12345678")
    with pytest.raises(AuthorityRequestMalformed, match="does not match"):  # 2^64 wraps in int64
        decode_array({"shape": [1 << 32, 1 << 32], "dtype": "f8"}, b"")


def test_matrix_frames() -> None:
    m = np.array([[1.0, -2.5], [0.0, 8.0]], dtype=np.float32)
    data = encode_matrix(m)
    assert data[:4] == b"SFMX"
    np.testing.assert_array_equal(decode_matrix(data, shape=(2, 2), bound=8.0), m)
    cases = [
        (encode_matrix(np.array([[np.nan, 0.0]])), {}, "NaN"),
        (data, {"bound": 2.0}, "bound"),
        (data, {"shape": (1, 4)}, "differs"),
        (encode_frame(b"SFMX", {"dtype": "f4", "shape": [4]}, bytes(16)), {}, "2-D"),
        (b"SFMX" + struct.pack(">II", 2, 2) + bytes(16), {}, "version"),
    ]
    for blob, kwargs, fragment in cases:
        with pytest.raises(UploadMalformed, match=fragment):
            decode_matrix(blob, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(UploadMalformed, match="2-D"):
        encode_matrix(np.zeros(3))
