"""The public face of ``crypto.sm`` that other packages code against."""

from __future__ import annotations

import inspect

import crypto.sm as sm
from crypto.sm import SM4GCM, SM2PrivateKey, SM2PublicKey


def _kinds(func: object) -> dict[str, inspect._ParameterKind]:
    return {n: p.kind for n, p in inspect.signature(func).parameters.items()}  # type: ignore[arg-type]


KW = inspect.Parameter.KEYWORD_ONLY


def test_exports() -> None:
    for name in (
        "DEFAULT_SM2_ID",
        "sm3_digest",
        "SM3Hasher",
        "sm3_file",
        "SM2PrivateKey",
        "SM2PublicKey",
        "SM4GCM",
    ):
        assert name in sm.__all__ and hasattr(sm, name)
    assert not any(name.startswith("_") for name in sm.__all__)
    assert "_sign_with_fixed_nonce_for_tests" not in dir(sm)


def test_keyword_only_parameters() -> None:
    assert _kinds(SM2PrivateKey.from_pem)["passphrase"] is KW
    assert _kinds(SM2PrivateKey.to_pem)["passphrase"] is KW
    assert _kinds(SM2PrivateKey.sign)["distid"] is KW
    assert _kinds(SM2PublicKey.verify)["distid"] is KW
    assert _kinds(SM4GCM.encrypt)["associated_data"] is KW
    assert _kinds(SM4GCM.decrypt)["associated_data"] is KW
    assert inspect.signature(SM4GCM.encrypt).parameters["associated_data"].default is (
        inspect.Parameter.empty
    )
    assert inspect.signature(SM2PrivateKey.sign).parameters["distid"].default == sm.DEFAULT_SM2_ID


def test_public_key_is_a_property() -> None:
    assert isinstance(inspect.getattr_static(SM2PrivateKey, "public_key"), property)


def test_pem_with_crlf_line_endings_loads() -> None:
    key = SM2PrivateKey.generate()
    crlf = key.public_key.to_pem().replace(b"\n", b"\r\n")
    assert SM2PublicKey.from_pem(crlf) == key.public_key
