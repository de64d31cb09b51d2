"""SM2 signature parsing and verification, SM4-GCM refusals: what surviving mutants left unchecked.

``scripts/mutation crypto-sm`` changed each of these and ``tests/crypto/sm`` stayed
green (docs/benchmarks.md, "Mutation testing", sixth run). Each DER below is what a
forger controls: the bytes of a signature on an upload, a plan or a receipt. A
parser that reads a leading ``0x80`` as positive accepts a second encoding of the
same signature, one that refuses the minimal ``00 80`` rejects honest ones, and one
that reads past the end crashes with an untyped ``IndexError`` instead of refusing.
Every refusal is matched in full (code and text).
"""

from __future__ import annotations

import re

import pytest

from crypto.errors import DecryptionFailed, ParameterInvalid, SignatureInvalid
from crypto.sm import SM4GCM, _curve
from crypto.sm._encoding import decode_signature, encode_signature
from crypto.sm.sm2 import _private_key_from_scalar_for_tests

D = 0x3945208F7B2144B13F36E38AC6D39F95889393692860B51A42FB81EF4DF7C5B8  # GB/T 32918 Annex A
KEY = _private_key_from_scalar_for_tests(D)
N = _curve.N
MESSAGE = b"message digest"


def _refused(blob: bytes, text: str) -> None:
    with pytest.raises(
        SignatureInvalid, match=rf"^\[CRYPTO_SIGNATURE_INVALID\] {re.escape(text)}$"
    ):
        KEY.public_key.verify(MESSAGE, blob)


def _der(*integers: bytes) -> bytes:
    """A SEQUENCE of the given INTEGER bodies (lengths as stated, no checks)."""
    body = b"".join(b"\x02" + bytes([len(i)]) + i for i in integers)
    return b"\x30" + bytes([len(body)]) + body


def test_an_integer_with_a_leading_0x80_is_negative_and_00_80_is_minimal() -> None:
    _refused(_der(b"\x80", b"\x01"), "signature DER: negative INTEGER")
    _refused(_der(b"\x01", b"\x80\x01"), "signature DER: negative INTEGER")
    assert decode_signature(_der(b"\x00\x80", b"\x01")) == (0x80, 1)
    assert decode_signature(_der(b"\x01", b"\x00\x80\x00")) == (1, 0x8000)
    _refused(_der(b"\x00\x7f", b"\x01"), "signature DER: non-minimal INTEGER encoding")


def test_a_sequence_that_ends_after_r_is_refused_as_missing_s() -> None:
    # r fills the whole SEQUENCE: nothing is left for s (no IndexError)
    _refused(_der(b"\x01\x02\x03\x04"), "signature DER: expected an INTEGER")
    _refused(_der(b"\x01\x02\x03\x04\x05"), "signature DER: expected an INTEGER")


def test_an_integer_that_is_empty_too_long_or_cut_short_is_refused() -> None:
    text = "signature DER: INTEGER length invalid or truncated"
    # s is the last two bytes, an INTEGER of length 0
    _refused(b"\x30\x06\x02\x02\x01\x02\x02\x00", text)
    # s claims 5 bytes where none follow (no IndexError on an empty INTEGER body)
    _refused(b"\x30\x06\x02\x02\x01\x02\x02\x05", text)
    # r claims 2 bytes more than the SEQUENCE holds
    _refused(b"\x30\x06\x02\x05\x01\x02\x02\x01", text)
    # 34 bytes: one more than a 32-byte value with its sign pad
    _refused(_der(b"\x00\x80" + bytes(32), b"\x01"), text)


def test_r_plus_s_zero_and_a_point_at_infinity_are_refused() -> None:
    _refused(encode_signature(1, N - 1), "signature does not verify (r + s = 0 mod n)")
    # s (1 + d) + r d = 0 mod n makes sG + tP the point at infinity (t = r + s, P = dG)
    r = 0x1234
    s = (-r * D * pow(1 + D, -1, N)) % N
    _refused(encode_signature(r, s), "signature does not verify (sG + tP is infinity)")


def test_the_sequence_and_a_wrong_signature_are_refused_by_name() -> None:
    good = encode_signature(0x1234, 0x5678)
    _refused(good + b"\x00", "signature DER: not a SEQUENCE of the stated length (truncated?)")
    trailing = b"\x30" + bytes([good[1] + 1]) + good[2:] + b"\x00"
    _refused(trailing, "signature DER: trailing bytes after s")
    _refused(good, "signature does not verify for this key, ID and message")


def test_sm4_refusals_name_the_argument_and_the_failure() -> None:
    aead = SM4GCM(SM4GCM.generate_key())
    blob = aead.encrypt(b"scores", associated_data=b"round 7")
    with pytest.raises(
        ParameterInvalid, match=r"^\[CRYPTO_PARAMETER_INVALID\] blob must be bytes, not str$"
    ):
        aead.decrypt(blob.hex(), associated_data=b"round 7")  # type: ignore[arg-type]
    with pytest.raises(
        ParameterInvalid,
        match=r"^\[CRYPTO_PARAMETER_INVALID\] associated_data must be bytes, not str$",
    ):
        aead.decrypt(blob, associated_data="round 7")  # type: ignore[arg-type]
    with pytest.raises(
        DecryptionFailed,
        match=r"^\[CRYPTO_DECRYPTION_FAILED\] authentication failed: wrong key, "
        r"wrong associated data or altered bytes$",
    ):
        aead.decrypt(blob, associated_data=b"round 8")
    assert aead.decrypt(bytearray(blob), associated_data=memoryview(b"round 7")) == b"scores"  # type: ignore[arg-type]
