"""Untrusted bytes into every SM2 parser: only the typed error comes out, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from crypto.errors import KeyInvalid, SignatureInvalid
from crypto.sm import SM2PrivateKey, SM2PublicKey, _curve
from crypto.sm._encoding import decode_signature, pem_decode, pem_encode
from crypto.sm.sm2 import _private_key_from_scalar_for_tests

KEY = _private_key_from_scalar_for_tests(0x1234567890ABCDEF << 100)
MESSAGE = b"round 3 tree head"
SIGNATURE = KEY.sign(MESSAGE)
SPKI = KEY.public_key.to_der()
_, PKCS8 = pem_decode(KEY.to_pem_unencrypted_insecure(), ("PRIVATE KEY",))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _mutate(blob: bytes, data: st.DataObject) -> bytes:
    out = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 3))):
        choice = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(len(out) - 1, 0)))
        if choice == "flip" and out:
            out[pos] ^= data.draw(st.integers(1, 255))
        elif choice == "cut":
            del out[pos:]
        else:
            out.insert(pos, data.draw(st.integers(0, 255)))
    return bytes(out)


@FAST
@given(blob=st.binary(max_size=100))
def test_decode_signature_random_bytes(blob: bytes) -> None:
    try:
        r, s = decode_signature(blob)
    except SignatureInvalid:
        return
    assert 1 <= r < _curve.N and 1 <= s < _curve.N


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_mutated_signature_never_verifies(data: st.DataObject) -> None:
    mutated = _mutate(SIGNATURE, data)
    assume(mutated != SIGNATURE)
    with pytest.raises(SignatureInvalid):
        KEY.public_key.verify(MESSAGE, mutated)


@FAST
@given(data=st.data())
def test_mutated_spki_rejected(data: st.DataObject) -> None:
    mutated = _mutate(SPKI, data)
    try:
        loaded = SM2PublicKey.from_der(mutated)
    except KeyInvalid:
        return
    assert mutated == SPKI and loaded == KEY.public_key


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_mutated_pkcs8_only_raises_key_invalid(data: st.DataObject) -> None:
    mutated = _mutate(PKCS8, data)
    try:
        loaded = SM2PrivateKey.from_pem(pem_encode(mutated, "PRIVATE KEY"), passphrase=None)
    except KeyInvalid:
        return
    # A few DER fields (e.g. the PKCS#8 version) may change without changing the key.
    assert loaded.public_key == KEY.public_key


@FAST
@given(text=st.binary(max_size=300))
def test_random_pem_text_rejected(text: bytes) -> None:
    with pytest.raises(KeyInvalid):
        SM2PublicKey.from_pem(text)
