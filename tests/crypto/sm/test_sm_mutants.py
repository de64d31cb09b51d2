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
from typing import Any

import pytest
from Crypto.IO import PKCS8
from Crypto.Util.asn1 import DerBitString, DerObjectId, DerOctetString, DerSequence

from crypto.errors import (
    CryptoError,
    DecryptionFailed,
    KeyExportRefused,
    KeyInvalid,
    ParameterInvalid,
    SignatureInvalid,
)
from crypto.sm import SM4GCM, SM2PrivateKey, SM2PublicKey, _curve
from crypto.sm._encoding import (
    EC_PUBLIC_KEY_OID,
    decode_signature,
    encode_signature,
    pem_decode,
    pem_encode,
    point_from_bytes,
)
from crypto.sm._keyfile import wrap_private_key_insecure
from crypto.sm.sm2 import _private_key_from_scalar_for_tests
from tests.crypto.sm.test_sm2_keys import PASS, _with_scrypt_params

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


# -- keys: what a key file or a caller controls ---------------------------------------------


def _raises(error: type[CryptoError], text: str, call: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(error, match=rf"^\[{re.escape(error.code)}\] {re.escape(text)}$"):
        call(*args, **kwargs)


def test_a_scalar_of_1_or_n_minus_2_is_a_key_and_0_or_n_minus_1_is_not() -> None:
    for d in (1, N - 2):
        assert _private_key_from_scalar_for_tests(d).public_key == (
            SM2PublicKey.from_der(_private_key_from_scalar_for_tests(d).public_key.to_der())
        )
    for d in (0, N - 1):
        _raises(
            KeyInvalid, "private scalar is outside [1, n-2]", _private_key_from_scalar_for_tests, d
        )


def test_direct_construction_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"^use SM2PublicKey\.from_pem or from_der$"):
        SM2PublicKey(_curve.G)
    with pytest.raises(TypeError, match=r"^use SM2PrivateKey\.generate or from_pem$"):
        SM2PrivateKey(D)


def test_a_distid_of_8191_bytes_is_the_longest() -> None:
    distid = b"i" * 8191
    KEY.public_key.verify(MESSAGE, KEY.sign(MESSAGE, distid=distid), distid=distid)
    _raises(
        ParameterInvalid,
        "distid is 8192 bytes; at most 8191",
        KEY.sign,
        MESSAGE,
        distid=distid + b"i",
    )


def _load(pem: bytes) -> SM2PrivateKey:
    return SM2PrivateKey.from_pem(pem, passphrase=PASS)


@pytest.mark.parametrize(
    ("n", "r", "p", "over"),
    [
        ((1 << 19) - 1, 1, 1, False),  # memory exactly 64 MiB, r = p = 1
        ((1 << 19) - 1, 1, 2, True),  # one p more: 128 bytes over
        (327_680, 1, 32, False),  # work N r p exactly the limit
        (0, 8, 5, True),
        (1 << 14, 8, 0, True),
    ],
)
def test_scrypt_limits_are_inclusive_and_every_parameter_counts(
    n: int, r: int, p: int, over: bool
) -> None:
    pem = _with_scrypt_params(n, r, p)
    if over:
        text = f"scrypt N={n}, r={r}, p={p} needs {128 * r * (n + p)} bytes"
        _raises(KeyInvalid, f"private key KDF parameters exceed the limits ({text})", _load, pem)
    else:  # within the limits: scrypt itself refuses an N that is no power of 2
        _raises(KeyInvalid, "cannot decrypt the private key: wrong passphrase", _load, pem)


def _rewritten(pem: bytes, path: tuple[int, ...], value: Any) -> bytes:
    """The encrypted key with the element at ``path`` (indices into nested SEQUENCEs) replaced."""
    _, der = pem_decode(pem, ("ENCRYPTED PRIVATE KEY",))

    def edit(blob: bytes, rest: tuple[int, ...]) -> bytes:
        seq = DerSequence().decode(blob)
        seq[rest[0]] = value if len(rest) == 1 else edit(seq[rest[0]], rest[1:])
        return bytes(seq.encode())

    return pem_encode(edit(der, path), "ENCRYPTED PRIVATE KEY")


def test_a_kdf_other_than_pbes2_scrypt_or_pbkdf2_is_refused_by_name() -> None:
    pem = KEY.to_pem(passphrase=PASS)
    pbes1 = _rewritten(pem, (0, 0), DerObjectId("1.2.840.113549.1.5.3").encode())
    text = "private key KDF parameters exceed the limits ({})"
    _raises(KeyInvalid, text.format("only PBES2 envelopes are accepted"), _load, pbes1)
    other = _rewritten(pem, (0, 1, 0, 0), DerObjectId("1.2.3.4").encode())
    _raises(KeyInvalid, text.format("unsupported key derivation 1.2.3.4"), _load, other)


def test_pbkdf2_with_1_iteration_loads_and_0_iterations_are_refused() -> None:
    ec_der = DerSequence([1, DerOctetString(D.to_bytes(32, "big"))]).encode()
    wrapped = PKCS8.wrap(
        ec_der,
        EC_PUBLIC_KEY_OID,
        PASS,
        protection="PBKDF2WithHMAC-SHA256AndAES256-CBC",
        prot_params={"iteration_count": 1},
        key_params=DerObjectId("1.2.156.10197.1.301"),
    )
    pem = pem_encode(bytes(wrapped), "ENCRYPTED PRIVATE KEY")
    assert _load(pem).public_key == KEY.public_key
    text = "private key KDF parameters exceed the limits (PBKDF2 iteration count 0)"
    _raises(KeyInvalid, text, _load, _rewritten(pem, (0, 1, 0, 1, 1), 0))


def test_an_exported_key_carries_our_scrypt_parameters() -> None:
    _, der = pem_decode(KEY.to_pem(passphrase=PASS), ("ENCRYPTED PRIVATE KEY",))
    alg = DerSequence().decode(DerSequence().decode(der)[0])
    kdf = DerSequence().decode(DerSequence().decode(alg[1])[0])
    params = DerSequence().decode(kdf[1])
    assert (params[1], params[2], params[3]) == (1 << 14, 8, 5)
    text = "passphrase is empty; refusing to export the private key"
    _raises(KeyExportRefused, text, KEY.to_pem, passphrase=b"")


def _ec_key(*fields: Any, scalar: bytes = D.to_bytes(32, "big")) -> bytes:
    """An unencrypted PKCS#8 PEM around ``ECPrivateKey { 1, scalar, fields... }``."""
    der = DerSequence([1, DerOctetString(scalar), *fields]).encode()
    return pem_encode(wrap_private_key_insecure(bytes(der)), "PRIVATE KEY")


def _point(prefix: bytes = b"\x04", size: int = 64) -> DerBitString:
    xy = KEY.public_key.to_der()[-64:]
    return DerBitString(prefix + xy[:size], explicit=1)


def test_an_ec_private_key_with_or_without_its_optional_fields_loads() -> None:
    curve = DerObjectId("1.2.156.10197.1.301", explicit=0)
    for fields in ((), (curve,), (_point(),), (curve, _point())):
        assert (
            SM2PrivateKey.from_pem(_ec_key(*fields), passphrase=None).public_key == KEY.public_key
        )


@pytest.mark.parametrize(
    ("fields", "scalar", "text"),
    [
        (
            (DerObjectId("1.2.840.10045.3.1.7", explicit=0),),
            32,
            "ECPrivateKey curve is 1.2.840.10045.3.1.7, not SM2",
        ),
        ((_point(size=63),), 32, "ECPrivateKey public key is not an uncompressed point"),
        ((_point(b"\x03"),), 32, "ECPrivateKey public key is not an uncompressed point"),
        ((DerOctetString(b"x", implicit=2),), 32, "ECPrivateKey has an unexpected field"),
        ((), 31, "ECPrivateKey scalar must be 32 bytes, got 31"),
    ],
)
def test_ec_private_key_refusals_are_named(fields: tuple[Any, ...], scalar: int, text: str) -> None:
    pem = _ec_key(*fields, scalar=D.to_bytes(32, "big")[32 - scalar :])
    _raises(KeyInvalid, text, SM2PrivateKey.from_pem, pem, passphrase=None)


def test_an_ec_private_key_of_the_wrong_version_or_shape_is_refused() -> None:
    der = DerSequence([2, DerOctetString(D.to_bytes(32, "big"))]).encode()
    pem = pem_encode(wrap_private_key_insecure(bytes(der)), "PRIVATE KEY")
    _raises(
        KeyInvalid, "ECPrivateKey version must be 1", SM2PrivateKey.from_pem, pem, passphrase=None
    )
    five = _ec_key(DerObjectId("1.2.156.10197.1.301", explicit=0), _point(), _point())
    text = "malformed ECPrivateKey DER (Unexpected number of members (5) in the sequence)"
    _raises(KeyInvalid, text, SM2PrivateKey.from_pem, five, passphrase=None)


def test_public_key_refusals_are_named() -> None:
    der = KEY.public_key.to_der()
    _raises(KeyInvalid, "public key DER must be bytes, not str", SM2PublicKey.from_der, der.hex())
    text = (
        "public key DER is not an SM2 SubjectPublicKeyInfo "
        "(id-ecPublicKey, curve 1.2.156.10197.1.301, uncompressed point)"
    )
    _raises(KeyInvalid, text, SM2PublicKey.from_der, der[:-1])
    off_curve = der[:-1] + bytes([der[-1] ^ 1])
    _raises(
        KeyInvalid, "public key point is not on the SM2 curve", SM2PublicKey.from_der, off_curve
    )


def test_key_file_size_limits_are_inclusive() -> None:
    pem = KEY.public_key.to_pem()
    padded = pem + b" " * (65536 - len(pem))  # whitespace may surround the block
    assert SM2PublicKey.from_pem(padded) == KEY.public_key
    _raises(
        KeyInvalid, "PEM is 65537 bytes; the limit is 65536", SM2PublicKey.from_pem, padded + b" "
    )
    load = SM2PrivateKey.from_pem
    at_limit = pem_encode(b"\x30\x82\x0f\xfc" + bytes(4092), "PRIVATE KEY")  # 4096 bytes
    with pytest.raises(
        KeyInvalid, match=r"^\[CRYPTO_KEY_INVALID\] malformed PKCS#8 private key \("
    ):
        load(at_limit, passphrase=None)
    over = pem_encode(bytes(4097), "PRIVATE KEY")
    _raises(
        KeyInvalid, "private key DER is 4097 bytes; the limit is 4096", load, over, passphrase=None
    )


def test_pem_refusals_are_named() -> None:
    load = SM2PrivateKey.from_pem
    _raises(
        KeyInvalid,
        "malformed PEM: expected exactly one -----BEGIN/END----- block",
        load,
        b"not a pem",
        passphrase=None,
    )
    text = "PEM label is 'PUBLIC KEY'; expected one of ENCRYPTED PRIVATE KEY, PRIVATE KEY"
    _raises(KeyInvalid, text, load, KEY.public_key.to_pem(), passphrase=None)
    # "=" inside the body: a non-canonical base64 that a lenient decoder would read
    bad = b"-----BEGIN PRIVATE KEY-----\nQU=JD\n-----END PRIVATE KEY-----\n"
    _raises(KeyInvalid, "malformed PEM: invalid base64 body", load, bad, passphrase=None)


def test_passphrase_refusals_are_named_and_a_clear_key_ignores_one() -> None:
    load = SM2PrivateKey.from_pem
    encrypted = KEY.to_pem(passphrase=PASS)
    text = "private key is encrypted; a passphrase is required"
    _raises(KeyInvalid, text, load, encrypted, passphrase=None)
    _, der = pem_decode(encrypted, ("ENCRYPTED PRIVATE KEY",))  # under the plain label
    _raises(KeyInvalid, text, load, pem_encode(der, "PRIVATE KEY"), passphrase=None)
    _raises(KeyInvalid, "passphrase must be bytes, not str", load, encrypted, passphrase="pw")
    _raises(
        KeyInvalid,
        "cannot decrypt the private key: wrong passphrase",
        load,
        encrypted,
        passphrase=b"pw",
    )
    clear = KEY.to_pem_unencrypted_insecure()
    assert load(clear, passphrase=b"unused").public_key == KEY.public_key


def test_a_key_file_without_a_curve_or_of_another_shape_is_refused_by_name() -> None:
    ec_der = bytes(DerSequence([1, DerOctetString(D.to_bytes(32, "big"))]).encode())
    no_curve = pem_encode(bytes(PKCS8.wrap(ec_der, EC_PUBLIC_KEY_OID)), "PRIVATE KEY")
    text = "private key curve is not SM2 (1.2.156.10197.1.301)"
    _raises(KeyInvalid, text, SM2PrivateKey.from_pem, no_curve, passphrase=None)
    not_a_sequence = b"\x04\x00"
    three_sequences = bytes(DerSequence([DerSequence([])] * 3).encode())
    for der in (not_a_sequence, three_sequences):
        with pytest.raises(
            KeyInvalid, match=r"^\[CRYPTO_KEY_INVALID\] malformed PKCS#8 private key \("
        ):
            SM2PrivateKey.from_pem(pem_encode(der, "PRIVATE KEY"), passphrase=None)


def test_an_embedded_public_key_of_another_key_is_refused_by_name() -> None:
    other = _private_key_from_scalar_for_tests(D + 1).public_key.to_der()[-64:]
    pem = _ec_key(DerBitString(b"\x04" + other, explicit=1))
    text = "embedded public key does not match the private scalar"
    _raises(KeyInvalid, text, SM2PrivateKey.from_pem, pem, passphrase=None)


def test_a_point_that_is_not_64_bytes_and_a_one_member_key_are_refused_by_name() -> None:
    _raises(KeyInvalid, "public point must be 64 bytes x||y, got 63", point_from_bytes, bytes(63))
    one = pem_encode(wrap_private_key_insecure(bytes(DerSequence([1]).encode())), "PRIVATE KEY")
    text = "malformed ECPrivateKey DER (Unexpected number of members (1) in the sequence)"
    _raises(KeyInvalid, text, SM2PrivateKey.from_pem, one, passphrase=None)
