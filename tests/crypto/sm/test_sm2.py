"""SM2 signatures: GB/T 32918 Annex A known answer, roundtrips, and every rejection path."""

from __future__ import annotations

import copy
import pickle

import pytest
from gmssl.sm2 import CryptSM2
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.errors import ParameterInvalid, SignatureInvalid
from crypto.sm import DEFAULT_SM2_ID, SM2PrivateKey, SM2PublicKey, _curve
from crypto.sm._encoding import decode_signature, encode_signature
from crypto.sm.sm2 import _private_key_from_scalar_for_tests, _sign_with_fixed_nonce_for_tests

# GB/T 32918.5-2017 Annex A (recommended curve), as in OpenSSL test/sm2_internal_test.c
ANNEX_D = 0x3945208F7B2144B13F36E38AC6D39F95889393692860B51A42FB81EF4DF7C5B8
ANNEX_K = 0x59276E27D506861A16680F3AD9C02DCCEF3CC1FA3CDBE4CE6D54B80DEAC1BC21
ANNEX_R = 0xF5A03B0648D2C4630EEAC513E1BB81A15944DA3827D5B74143AC7EACEEE720B3
ANNEX_S = 0xB1B6AA29DF212FD8763182BC0D421CA1BB9038FD1F7F42D4840B69C485BBC1AA
ANNEX_X = 0x09F9DF311E5421A150DD7D161E4BC5C672179FAD1833FC076BB08FF356F35020
ANNEX_MSG = b"message digest"
# A key whose x coordinate starts with byte 0x04: gmssl's lstrip("04") bug case.
D_X_04 = 0xB910B325163485EAB70FCD3EB89B27EC601D9EF39A4F13D73716E80289336351

KEY = _private_key_from_scalar_for_tests(ANNEX_D)
N = _curve.N


def test_annex_a_signature_known_answer() -> None:
    signature = _sign_with_fixed_nonce_for_tests(KEY, ANNEX_MSG, ANNEX_K)
    assert decode_signature(signature) == (ANNEX_R, ANNEX_S)
    assert signature == encode_signature(ANNEX_R, ANNEX_S)
    KEY.public_key.verify(ANNEX_MSG, signature)


def test_annex_a_public_key_and_der_prefix() -> None:
    der = KEY.public_key.to_der()
    assert der.hex().startswith("3059301306072a8648ce3d020106082a811ccf5501822d03420004")
    assert der[27:59] == ANNEX_X.to_bytes(32, "big")  # x starts with 0x09: lstrip hazard


def test_matches_gmssl_sign_with_sm3_for_the_default_id() -> None:
    gm = CryptSM2(private_key=f"{ANNEX_D:064x}", public_key=KEY.public_key.to_der()[-64:].hex())
    raw = gm.sign_with_sm3(ANNEX_MSG, f"{ANNEX_K:064x}")
    assert raw == f"{ANNEX_R:064x}{ANNEX_S:064x}"


def test_key_with_x_starting_04_works_where_gmssl_corrupts_it() -> None:
    key = _private_key_from_scalar_for_tests(D_X_04)
    xy_hex = key.public_key.to_der()[-64:].hex()
    assert xy_hex.startswith("04")
    assert CryptSM2(private_key="", public_key=xy_hex).public_key != xy_hex  # gmssl's lstrip bug
    key.public_key.verify(b"m", key.sign(b"m"))


@settings(max_examples=15, deadline=None)
@given(message=st.binary(max_size=200), distid=st.binary(max_size=40))
def test_sign_verify_roundtrip(message: bytes, distid: bytes) -> None:
    signature = KEY.sign(message, distid=distid)
    KEY.public_key.verify(message, signature, distid=distid)


def test_signatures_are_randomized() -> None:
    assert KEY.sign(b"same") != KEY.sign(b"same")


def test_generated_keys_differ_and_verify() -> None:
    a, b = SM2PrivateKey.generate(), SM2PrivateKey.generate()
    assert a.public_key != b.public_key
    sig = a.sign(b"hello")
    a.public_key.verify(b"hello", sig)
    with pytest.raises(SignatureInvalid, match="does not verify for this key"):
        b.public_key.verify(b"hello", sig)


def test_sign_and_verify_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * (3 << 20))
    signature = KEY.sign_file(path)
    KEY.public_key.verify(b"x" * (3 << 20), signature)
    KEY.public_key.verify_file(path, KEY.sign(b"x" * (3 << 20)))
    path.write_bytes(b"x" * (3 << 20) + b"y")
    with pytest.raises(SignatureInvalid, match="does not verify"):
        KEY.public_key.verify_file(path, signature)


def test_flipped_message_bit_fails() -> None:
    signature = KEY.sign(ANNEX_MSG)
    with pytest.raises(SignatureInvalid, match="does not verify for this key, ID and message"):
        KEY.public_key.verify(b"message digesu", signature)


def test_wrong_distid_fails() -> None:
    signature = KEY.sign(ANNEX_MSG, distid=b"alice@hospital")
    with pytest.raises(SignatureInvalid, match="does not verify"):
        KEY.public_key.verify(ANNEX_MSG, signature)
    with pytest.raises(SignatureInvalid, match="does not verify"):
        KEY.public_key.verify(ANNEX_MSG, signature, distid=b"")


@pytest.mark.parametrize(
    ("r", "s", "fragment"),
    [
        (0, ANNEX_S, "signature r is outside [1, n-1]"),
        (N, ANNEX_S, "signature r is outside [1, n-1]"),
        (ANNEX_R, 0, "signature s is outside [1, n-1]"),
        (ANNEX_R, N, "signature s is outside [1, n-1]"),
        (1, N - 1, "r + s = 0 mod n"),
    ],
)
def test_out_of_range_r_s_rejected(r: int, s: int, fragment: str) -> None:
    with pytest.raises(SignatureInvalid, match=fragment.replace("[", r"\[").replace("+", r"\+")):
        KEY.public_key.verify(ANNEX_MSG, encode_signature(r, s))


GOOD = encode_signature(ANNEX_R, ANNEX_S)  # 72 bytes: both integers need a 0x00 pad
SHORT = encode_signature(0x1234, 0x5678)  # in range, room to grow under the size cap


@pytest.mark.parametrize(
    ("blob", "fragment"),
    [
        (GOOD[:-1], "truncated"),
        (GOOD[:6], "expected 8 to 72"),
        (GOOD + b"\x00", "expected 8 to 72"),
        (SHORT + b"\x00", "stated length"),
        (b"\x30" + bytes([SHORT[1] + 1]) + SHORT[2:] + b"\x00", "trailing bytes after s"),
        (b"\x30\x81" + SHORT[1:], "stated length"),
        (b"\x31" + SHORT[1:], "not a SEQUENCE"),
        (b"\x30\x08\x02\x02\x00\x01\x02\x02\x00\x01", "non-minimal INTEGER"),
        (b"\x30\x06\x02\x01\x81\x02\x01\x01", "negative INTEGER"),
        (b"\x30\x06\x04\x01\x01\x02\x01\x01", "expected an INTEGER"),
        (b"\x30\x06\x02\x00\x02\x02\x01\x01", "INTEGER length invalid"),
        (b"", "expected 8 to 72"),
    ],
    ids=lambda v: v.hex()[:24] if isinstance(v, bytes) else v,
)
def test_malformed_der_rejected(blob: bytes, fragment: str) -> None:
    with pytest.raises(SignatureInvalid, match=fragment):
        KEY.public_key.verify(ANNEX_MSG, blob)


def test_signature_type_checked() -> None:
    with pytest.raises(SignatureInvalid, match="signature must be bytes, not str"):
        KEY.public_key.verify(ANNEX_MSG, GOOD.hex())  # type: ignore[arg-type]


def test_raw_r_s_signature_rejected() -> None:
    with pytest.raises(SignatureInvalid):
        KEY.public_key.verify(ANNEX_MSG, ANNEX_R.to_bytes(32, "big") + ANNEX_S.to_bytes(32, "big"))


def test_parameter_checks() -> None:
    with pytest.raises(ParameterInvalid, match="distid must be bytes, not str"):
        KEY.sign(b"m", distid="1234567812345678")  # type: ignore[arg-type]
    with pytest.raises(ParameterInvalid, match="distid is 8192 bytes; at most 8191"):
        KEY.sign(b"m", distid=b"x" * 8192)
    with pytest.raises(ParameterInvalid, match="message must be bytes, not str"):
        KEY.sign("m")  # type: ignore[arg-type]
    with pytest.raises(ParameterInvalid, match="k must be in"):
        _sign_with_fixed_nonce_for_tests(KEY, b"m", 0)


def test_default_id_constant() -> None:
    assert DEFAULT_SM2_ID == b"1234567812345678"


def test_private_key_is_opaque() -> None:
    text = repr(KEY)
    assert f"{ANNEX_D:x}" not in text.lower() and "fingerprint" in text
    for name in dir(KEY):
        if not name.startswith("_"):
            assert getattr(KEY, name) != ANNEX_D
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(KEY)
    with pytest.raises(TypeError, match="cannot be pickled"):
        copy.copy(KEY)
    with pytest.raises(TypeError, match="cannot be pickled"):
        copy.deepcopy(KEY)
    with pytest.raises(TypeError, match="use SM2PrivateKey.generate or from_pem"):
        SM2PrivateKey(ANNEX_D)


def test_public_key_pickles_through_validation() -> None:
    public = KEY.public_key
    assert pickle.loads(pickle.dumps(public)) == public
    assert "fingerprint=" in repr(public)
    with pytest.raises(TypeError, match="use SM2PublicKey.from_pem or from_der"):
        SM2PublicKey((1, 2))
