"""Interoperability with the ``openssl`` command line (OpenSSL 3.x), tested both ways.

OpenSSL 3.0's default SM2 ID is empty, so every ``openssl`` call names it with
``-sigopt distid:`` / ``-pkeyopt distid:`` (docs/background.md).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from crypto.errors import KeyInvalid, SignatureInvalid
from crypto.sm import SM2PrivateKey, SM2PublicKey

DISTID = "1234567812345678"
PASS = "interop passphrase"
MESSAGE = b"tree head: origin\n42\nq2b8...\n"


def openssl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)} failed: {result.stderr}")
    return result


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("openssl")
    (path / "msg.txt").write_bytes(MESSAGE)
    priv, pub = str(path / "ossl-priv.pem"), str(path / "ossl-pub.pem")
    openssl("genpkey", "-algorithm", "SM2", "-out", priv)
    openssl("pkey", "-in", priv, "-pubout", "-out", pub)
    key = SM2PrivateKey.generate()
    (path / "our-priv-enc.pem").write_bytes(key.to_pem(passphrase=PASS.encode()))
    (path / "our-priv.pem").write_bytes(key.to_pem_unencrypted_insecure())
    (path / "our-pub.pem").write_bytes(key.public_key.to_pem())
    (path / "our.sig").write_bytes(key.sign(MESSAGE))
    return path


def _dgst_verify(work: Path, pub: str, sig: str, distid: str) -> subprocess.CompletedProcess[str]:
    return openssl(
        "dgst",
        "-sm3",
        "-verify",
        str(work / pub),
        "-signature",
        str(work / sig),
        "-sigopt",
        f"distid:{distid}",
        str(work / "msg.txt"),
        check=False,
    )


def test_openssl_verifies_our_signature(work: Path) -> None:
    result = _dgst_verify(work, "our-pub.pem", "our.sig", DISTID)
    assert result.returncode == 0 and "Verified OK" in result.stdout


def test_openssl_rejects_our_signature_under_another_id(work: Path) -> None:
    result = _dgst_verify(work, "our-pub.pem", "our.sig", "someone-else")
    assert result.returncode != 0 and "Verification failure" in result.stdout


def test_openssl_pkeyutl_verifies_our_signature(work: Path) -> None:
    result = openssl(
        "pkeyutl",
        "-verify",
        "-pubin",
        "-inkey",
        str(work / "our-pub.pem"),
        "-rawin",
        "-digest",
        "sm3",
        "-in",
        str(work / "msg.txt"),
        "-sigfile",
        str(work / "our.sig"),
        "-pkeyopt",
        f"distid:{DISTID}",
    )
    assert "Signature Verified Successfully" in result.stdout


def test_we_verify_an_openssl_signature(work: Path) -> None:
    openssl(
        "dgst",
        "-sm3",
        "-sign",
        str(work / "ossl-priv.pem"),
        "-sigopt",
        f"distid:{DISTID}",
        "-out",
        str(work / "ossl.sig"),
        str(work / "msg.txt"),
    )
    public = SM2PublicKey.from_pem((work / "ossl-pub.pem").read_bytes())
    signature = (work / "ossl.sig").read_bytes()
    public.verify(MESSAGE, signature)
    with pytest.raises(SignatureInvalid, match="does not verify"):
        public.verify(MESSAGE, signature, distid=b"someone-else")
    with pytest.raises(SignatureInvalid, match="does not verify"):
        public.verify(MESSAGE + b"!", signature)


def test_openssl_generated_key_loads_and_matches_its_public_key(work: Path) -> None:
    key = SM2PrivateKey.from_pem((work / "ossl-priv.pem").read_bytes(), passphrase=None)
    assert key.public_key == SM2PublicKey.from_pem((work / "ossl-pub.pem").read_bytes())
    (work / "by-ossl-key.sig").write_bytes(key.sign(MESSAGE))
    result = _dgst_verify(work, "ossl-pub.pem", "by-ossl-key.sig", DISTID)
    assert "Verified OK" in result.stdout


def test_openssl_reads_our_encrypted_private_key(work: Path) -> None:
    result = openssl(
        "pkey", "-in", str(work / "our-priv-enc.pem"), "-passin", f"pass:{PASS}", "-pubout"
    )
    assert result.stdout.encode() == (work / "our-pub.pem").read_bytes()
    wrong = openssl(
        "pkey",
        "-in",
        str(work / "our-priv-enc.pem"),
        "-passin",
        "pass:wrong",
        "-noout",
        check=False,
    )
    assert wrong.returncode != 0


def test_openssl_reads_our_unencrypted_private_key(work: Path) -> None:
    result = openssl("pkey", "-in", str(work / "our-priv.pem"), "-pubout")
    assert result.stdout.encode() == (work / "our-pub.pem").read_bytes()
    text = openssl("pkey", "-in", str(work / "our-priv.pem"), "-noout", "-text").stdout
    assert "ASN1 OID: SM2" in text


def test_openssl_signs_with_our_encrypted_key(work: Path) -> None:
    openssl(
        "dgst",
        "-sm3",
        "-sign",
        str(work / "our-priv-enc.pem"),
        "-passin",
        f"pass:{PASS}",
        "-sigopt",
        f"distid:{DISTID}",
        "-out",
        str(work / "ossl-with-ours.sig"),
        str(work / "msg.txt"),
    )
    public = SM2PublicKey.from_pem((work / "our-pub.pem").read_bytes())
    public.verify(MESSAGE, (work / "ossl-with-ours.sig").read_bytes())


def test_openssl_encrypted_pkcs8_loads(work: Path) -> None:
    openssl(
        "pkcs8",
        "-topk8",
        "-v2",
        "aes-256-cbc",
        "-in",
        str(work / "ossl-priv.pem"),
        "-passout",
        f"pass:{PASS}",
        "-out",
        str(work / "ossl-priv-enc.pem"),
    )
    pem = (work / "ossl-priv-enc.pem").read_bytes()
    assert pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    key = SM2PrivateKey.from_pem(pem, passphrase=PASS.encode())
    assert key.public_key == SM2PublicKey.from_pem((work / "ossl-pub.pem").read_bytes())


def test_openssl_der_public_key_has_the_sm2_spki_prefix(work: Path) -> None:
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-in", str(work / "ossl-pub.pem"), "-outform", "DER"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert SM2PublicKey.from_der(der).to_der() == der
    assert der.hex().startswith("3059301306072a8648ce3d020106082a811ccf5501822d03420004")


@pytest.mark.parametrize(
    ("genpkey_args", "fragment"),
    [
        (("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"), "curve is not SM2"),
        (("-algorithm", "ED25519"), "algorithm is 1.3.101.112, not id-ecPublicKey"),
    ],
    ids=["p256", "ed25519"],
)
def test_non_sm2_openssl_keys_rejected(
    work: Path, genpkey_args: tuple[str, ...], fragment: str
) -> None:
    path = work / f"other-{genpkey_args[1]}.pem"
    openssl("genpkey", *genpkey_args, "-out", str(path))
    with pytest.raises(KeyInvalid, match=fragment):
        SM2PrivateKey.from_pem(path.read_bytes(), passphrase=None)
    public = openssl("pkey", "-in", str(path), "-pubout").stdout.encode()
    with pytest.raises(KeyInvalid, match="not an SM2 SubjectPublicKeyInfo"):
        SM2PublicKey.from_pem(public)
