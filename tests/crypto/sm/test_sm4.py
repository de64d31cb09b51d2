"""SM4 known answers (GB/T 32907-2016 Annex A, RFC 8998 A.1) and SM4-GCM misuse/tamper cases.

Raw ECB appears only here, to check the block cipher against the standard;
the package itself exposes nothing but the AEAD.
"""

from __future__ import annotations

import copy
import pickle

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.errors import DecryptionFailed, KeyInvalid, ParameterInvalid
from crypto.sm import SM4GCM

KEY = bytes.fromhex("0123456789abcdeffedcba9876543210")
# RFC 8998 appendix A.1. NOTE: the plaintext is the 8-byte-run pattern below,
# not "64 bytes of AA" (an easy misreading); only this one gives the tag.
GCM_IV = bytes.fromhex("00001234567800000000abcd")
GCM_AAD = bytes.fromhex("feedfacedeadbeeffeedfacedeadbeefabaddad2")
GCM_PT = b"".join(bytes([b]) * 8 for b in (0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF, 0xEE, 0xAA))
GCM_CT = bytes.fromhex(
    "17f399f08c67d5ee19d0dc9969c4bb7d5fd46fd3756489069157b282bb200735"
    "d82710ca5c22f0ccfa7cbf93d496ac15a56834cbcf98c397b4024a2691233b8d"
)
GCM_TAG = bytes.fromhex("83de3541e4c2b58177e065a9bf7b62ec")


def _ecb_encryptor():  # type: ignore[no-untyped-def]
    return Cipher(algorithms.SM4(KEY), modes.ECB()).encryptor()


def test_sm4_block_known_answer() -> None:
    assert _ecb_encryptor().update(KEY).hex() == "681edf34d206965e86b3e94f536e4246"


def test_sm4_one_million_encryptions_known_answer() -> None:
    encryptor, block = _ecb_encryptor(), KEY
    for _ in range(1_000_000):
        block = encryptor.update(block)
    assert block.hex() == "595298c7c6fd271f0402f804c33d3f66"


def test_rfc8998_vector_decrypts_through_our_wire_format() -> None:
    blob = GCM_IV + GCM_CT + GCM_TAG
    assert SM4GCM(KEY).decrypt(blob, associated_data=GCM_AAD) == GCM_PT


def test_rfc8998_vector_encrypts_to_pinned_ciphertext_and_tag() -> None:
    body = SM4GCM(KEY)._encrypt_with_nonce(GCM_IV, GCM_PT, GCM_AAD)
    assert body[:-16] == GCM_CT
    assert body[-16:] == GCM_TAG


def test_misread_plaintext_does_not_give_the_rfc_tag() -> None:
    # Regression for the misreading: 64 x 0xAA must NOT reproduce the RFC tag.
    body = SM4GCM(KEY)._encrypt_with_nonce(GCM_IV, b"\xaa" * 64, GCM_AAD)
    assert body[-16:] != GCM_TAG


@settings(max_examples=50, deadline=None)
@given(plaintext=st.binary(max_size=2048), aad=st.binary(max_size=64))
def test_aead_roundtrip(plaintext: bytes, aad: bytes) -> None:
    aead = SM4GCM(SM4GCM.generate_key())
    blob = aead.encrypt(plaintext, associated_data=aad)
    assert len(blob) == len(plaintext) + 28
    assert aead.decrypt(blob, associated_data=aad) == plaintext


def test_nonces_are_fresh() -> None:
    aead = SM4GCM(KEY)
    nonces = {aead.encrypt(b"x", associated_data=b"")[:12] for _ in range(200)}
    assert len(nonces) == 200


def test_wrong_aad_fails() -> None:
    aead = SM4GCM(KEY)
    blob = aead.encrypt(b"scores", associated_data=b"round 1")
    with pytest.raises(DecryptionFailed, match="authentication failed"):
        aead.decrypt(blob, associated_data=b"round 2")


@pytest.mark.parametrize("position", [0, 12, -1], ids=["nonce", "ciphertext", "tag"])
def test_tampered_byte_fails(position: int) -> None:
    aead = SM4GCM(KEY)
    blob = bytearray(aead.encrypt(b"scores!", associated_data=b"a"))
    blob[position] ^= 0x01
    with pytest.raises(DecryptionFailed, match="altered bytes"):
        aead.decrypt(bytes(blob), associated_data=b"a")


def test_wrong_key_fails() -> None:
    blob = SM4GCM(KEY).encrypt(b"scores", associated_data=b"a")
    with pytest.raises(DecryptionFailed, match="wrong key"):
        SM4GCM(SM4GCM.generate_key()).decrypt(blob, associated_data=b"a")


def test_truncated_blob_fails() -> None:
    with pytest.raises(DecryptionFailed, match="27 bytes; at least 28"):
        SM4GCM(KEY).decrypt(b"\x00" * 27, associated_data=b"")


def test_associated_data_is_required_keyword() -> None:
    aead = SM4GCM(KEY)
    with pytest.raises(TypeError):
        aead.encrypt(b"x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        aead.encrypt(b"x", b"aad")  # type: ignore[misc]
    with pytest.raises(ParameterInvalid, match="associated_data must be bytes, not NoneType"):
        aead.encrypt(b"x", associated_data=None)  # type: ignore[arg-type]
    with pytest.raises(ParameterInvalid, match="plaintext must be bytes, not str"):
        aead.encrypt("x", associated_data=b"")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [b"", b"\x00" * 15, b"\x00" * 32])
def test_key_length_checked(bad: bytes) -> None:
    with pytest.raises(KeyInvalid, match=f"key must be 16 bytes, got {len(bad)}"):
        SM4GCM(bad)


def test_key_type_checked() -> None:
    with pytest.raises(KeyInvalid, match="key must be bytes, not str"):
        SM4GCM("0123456789abcdef")  # type: ignore[arg-type]


def test_key_is_opaque() -> None:
    aead = SM4GCM(KEY)
    assert KEY.hex() not in repr(aead) and "hidden" in repr(aead)
    assert not any(isinstance(getattr(aead, n, None), bytes) for n in dir(aead) if n[0] != "_")
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(aead)
    with pytest.raises(TypeError, match="cannot be pickled"):
        copy.copy(aead)


def test_generate_key_is_random_16_bytes() -> None:
    keys = {SM4GCM.generate_key() for _ in range(50)}
    assert len(keys) == 50 and all(len(k) == 16 for k in keys)
