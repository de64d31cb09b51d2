"""SM2 key encodings: SPKI / PKCS#8 PEM roundtrips and every rejection path."""

from __future__ import annotations

import base64

import pytest

from crypto.errors import KeyExportRefused, KeyInvalid
from crypto.sm import SM2PrivateKey, SM2PublicKey, _curve
from crypto.sm._encoding import encode_ec_private_key, encode_spki, pem_decode, pem_encode
from crypto.sm._keyfile import wrap_private_key_insecure
from crypto.sm.sm2 import _private_key_from_scalar_for_tests

D = 0x3945208F7B2144B13F36E38AC6D39F95889393692860B51A42FB81EF4DF7C5B8
KEY = _private_key_from_scalar_for_tests(D)
PUB = KEY.public_key
PASS = b"correct horse battery staple"


@pytest.fixture(scope="module")
def encrypted_pem() -> bytes:
    return KEY.to_pem(passphrase=PASS)


def test_public_pem_and_der_roundtrip() -> None:
    assert SM2PublicKey.from_pem(PUB.to_pem()) == PUB
    assert SM2PublicKey.from_der(PUB.to_der()) == PUB
    assert PUB.to_pem().startswith(b"-----BEGIN PUBLIC KEY-----\n")
    assert len(PUB.fingerprint()) == 64 and int(PUB.fingerprint(), 16) >= 0


def test_fingerprint_is_sm3_of_der() -> None:
    import hashlib

    assert PUB.fingerprint() == hashlib.new("sm3", PUB.to_der()).hexdigest()


def test_encrypted_private_pem_roundtrip(encrypted_pem: bytes) -> None:
    assert encrypted_pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    assert base64.b64encode(D.to_bytes(32, "big")) not in encrypted_pem
    loaded = SM2PrivateKey.from_pem(encrypted_pem, passphrase=PASS)
    assert loaded.public_key == PUB
    PUB.verify(b"m", loaded.sign(b"m"))


def test_encrypted_pem_is_salted(encrypted_pem: bytes) -> None:
    assert KEY.to_pem(passphrase=PASS) != encrypted_pem


def test_unencrypted_pem_roundtrip_is_explicit() -> None:
    pem = KEY.to_pem_unencrypted_insecure()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert SM2PrivateKey.from_pem(pem, passphrase=None).public_key == PUB


def test_wrong_passphrase_rejected(encrypted_pem: bytes) -> None:
    with pytest.raises(KeyInvalid, match="wrong passphrase"):
        SM2PrivateKey.from_pem(encrypted_pem, passphrase=b"not it")


def test_missing_passphrase_rejected(encrypted_pem: bytes) -> None:
    with pytest.raises(KeyInvalid, match="encrypted; a passphrase is required"):
        SM2PrivateKey.from_pem(encrypted_pem, passphrase=None)
    with pytest.raises(TypeError):
        SM2PrivateKey.from_pem(encrypted_pem)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("passphrase", "fragment"),
    [(b"", "passphrase is empty"), (None, "must be bytes, not NoneType"), ("pw", "not str")],
)
def test_export_without_a_real_passphrase_refused(passphrase: object, fragment: str) -> None:
    with pytest.raises(KeyExportRefused, match=fragment):
        KEY.to_pem(passphrase=passphrase)  # type: ignore[arg-type]


def _plain_pkcs8(d: int, point: tuple[int, int]) -> bytes:
    return pem_encode(wrap_private_key_insecure(encode_ec_private_key(d, point)), "PRIVATE KEY")


@pytest.mark.parametrize(("d", "fragment"), [(0, "outside [1, n-2]"), (_curve.N - 1, "outside")])
def test_private_scalar_out_of_range_rejected(d: int, fragment: str) -> None:
    with pytest.raises(KeyInvalid, match=fragment.replace("[", r"\[")):
        SM2PrivateKey.from_pem(_plain_pkcs8(d, _curve.G), passphrase=None)


def test_embedded_public_key_mismatch_rejected() -> None:
    with pytest.raises(KeyInvalid, match="embedded public key does not match"):
        SM2PrivateKey.from_pem(_plain_pkcs8(D, _curve.G), passphrase=None)


def _spki_pem(point: tuple[int, int]) -> bytes:
    return pem_encode(encode_spki(point), "PUBLIC KEY")


X, Y = _curve.scalar_mult(D, _curve.G)


@pytest.mark.parametrize(
    "blob",
    [
        encode_spki((X, (Y + 1) % _curve.P)),
        encode_spki((0, 0)),
        PUB.to_der()[:-32] + b"\xff" * 32,  # y >= p
        PUB.to_der()[:-64] + _curve.P.to_bytes(32, "big") + PUB.to_der()[-32:],  # x = p
    ],
    ids=["y+1", "zero", "y>=p", "x=p"],
)
def test_point_not_on_curve_rejected(blob: bytes) -> None:
    with pytest.raises(KeyInvalid, match="not on the SM2 curve"):
        SM2PublicKey.from_der(blob)


def test_point_not_on_curve_rejected_from_pem() -> None:
    with pytest.raises(KeyInvalid, match="not on the SM2 curve"):
        SM2PublicKey.from_pem(_spki_pem((X, (Y + 1) % _curve.P)))


def test_point_not_on_curve_rejected_inside_private_key() -> None:
    with pytest.raises(KeyInvalid, match="embedded public key does not match"):
        SM2PrivateKey.from_pem(_plain_pkcs8(D, (X, (Y + 1) % _curve.P)), passphrase=None)


@pytest.mark.parametrize(
    ("der", "fragment"),
    [
        (PUB.to_der()[:-1], "not an SM2 SubjectPublicKeyInfo"),
        (PUB.to_der() + b"\x00", "not an SM2 SubjectPublicKeyInfo"),
        # P-256 OID in place of the SM2 curve OID
        (
            bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200")
            + PUB.to_der()[26:],
            "curve 1.2.156.10197.1.301",
        ),
        # compressed point (03 || x)
        (
            bytes.fromhex("3039301306072a8648ce3d020106082a811ccf5501822d032200")
            + bytes([2 + (Y & 1)])
            + X.to_bytes(32, "big"),
            "uncompressed point",
        ),
    ],
    ids=["truncated", "trailing", "p256-oid", "compressed"],
)
def test_malformed_spki_rejected(der: bytes, fragment: str) -> None:
    with pytest.raises(KeyInvalid, match=fragment):
        SM2PublicKey.from_der(der)


@pytest.mark.parametrize(
    ("pem", "fragment"),
    [
        (b"not a pem at all", "malformed PEM"),
        (b"-----BEGIN PUBLIC KEY-----\n!!!!\n-----END PUBLIC KEY-----\n", "malformed PEM"),
        (b"-----BEGIN PUBLIC KEY-----\nAAA\n-----END PUBLIC KEY-----\n", "invalid base64"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "label is"),
        (b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "label is"),
        (PUB.to_pem() + PUB.to_pem(), "exactly one"),
        (PUB.to_pem()[:-30], "malformed PEM"),
        (b"-----BEGIN PUBLIC KEY-----\n" + b"A" * 70000 + b"\n", "the limit is 65536"),
        ("text, not bytes", "PEM must be bytes, not str"),
    ],
    ids=["garbage", "bad-chars", "bad-b64", "cert", "mismatch", "two", "cut", "huge", "str"],
)
def test_malformed_public_pem_rejected(pem: bytes, fragment: str) -> None:
    with pytest.raises(KeyInvalid, match=fragment):
        SM2PublicKey.from_pem(pem)


def test_public_pem_is_not_a_private_key() -> None:
    with pytest.raises(KeyInvalid, match="label is 'PUBLIC KEY'"):
        SM2PrivateKey.from_pem(PUB.to_pem(), passphrase=None)


def test_garbage_pkcs8_rejected() -> None:
    pem = pem_encode(b"\x30\x03\x02\x01\x00", "PRIVATE KEY")
    with pytest.raises(KeyInvalid, match="malformed PKCS#8"):
        SM2PrivateKey.from_pem(pem, passphrase=None)


def test_oversize_pkcs8_rejected() -> None:
    with pytest.raises(KeyInvalid, match="the limit is 4096"):
        SM2PrivateKey.from_pem(pem_encode(b"\x00" * 5000, "PRIVATE KEY"), passphrase=None)


def _with_scrypt_params(n: int, r: int, p: int) -> bytes:
    """Our encrypted key with its scrypt parameters rewritten (an attacker-made file)."""
    from Crypto.Util.asn1 import DerSequence

    _, der = pem_decode(KEY.to_pem(passphrase=PASS), ("ENCRYPTED PRIVATE KEY",))
    outer = DerSequence().decode(der)
    alg = DerSequence().decode(outer[0])
    pbes2 = DerSequence().decode(alg[1])
    kdf = DerSequence().decode(pbes2[0])
    params = DerSequence().decode(kdf[1])
    params[1], params[2], params[3] = n, r, p
    kdf[1] = params.encode()
    pbes2[0] = kdf.encode()
    alg[1] = pbes2.encode()
    outer[0] = alg.encode()
    return pem_encode(outer.encode(), "ENCRYPTED PRIVATE KEY")


@pytest.mark.parametrize(
    ("n", "r", "p"),
    [(1 << 24, 8, 5), (1 << 20, 8, 1), (1 << 14, 8, 1000), (1 << 14, 0, 5)],
    ids=["cpu-hours", "1-GiB-memory", "parallel-cost", "zero-block-size"],
)
def test_crafted_kdf_cost_refused_without_running_it(n: int, r: int, p: int) -> None:
    with pytest.raises(KeyInvalid, match="KDF parameters exceed the limits"):
        SM2PrivateKey.from_pem(_with_scrypt_params(n, r, p), passphrase=PASS)


def test_corrupted_encrypted_body_rejected(encrypted_pem: bytes) -> None:
    _, der = pem_decode(encrypted_pem, ("ENCRYPTED PRIVATE KEY",))
    broken = der[:-20] + bytes(b ^ 0x5A for b in der[-20:])
    with pytest.raises(KeyInvalid, match="wrong passphrase"):
        SM2PrivateKey.from_pem(pem_encode(broken, "ENCRYPTED PRIVATE KEY"), passphrase=PASS)
