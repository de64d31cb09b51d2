"""PKCS#8 envelopes for SM2 private keys (RFC 5208, RFC 5958; PBES2 from RFC 8018).

Encrypted keys use PBES2 with scrypt (RFC 7914; N = 2^14, r = 8, p = 5, which
is OWASP's scrypt floor and stays within OpenSSL's 32 MiB scrypt memory cap,
so ``openssl pkey -passin`` reads them) and AES-256-CBC. pycryptodome does the
envelope; before it runs, :func:`_check_kdf_cost` reads the file's KDF
parameters and refuses any that would demand more than a few seconds of CPU or
64 MiB of memory, so a crafted file cannot tie up the loader.
"""

from __future__ import annotations

import os

from Crypto.IO import PKCS8
from Crypto.Util.asn1 import DerObjectId, DerSequence

from crypto.errors import KeyExportRefused, KeyInvalid
from crypto.sm._encoding import (
    EC_PUBLIC_KEY_OID,
    SM2_CURVE_OID,
    decode_ec_private_key,
)

__all__ = [
    "SCRYPT_N",
    "SCRYPT_P",
    "SCRYPT_R",
    "unwrap_private_key",
    "wrap_private_key",
    "wrap_private_key_insecure",
]

PROTECTION = "scryptAndAES256-CBC"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 5
_MAX_KDF_MEMORY = 64 << 20
_MAX_DER = 4096
# scrypt's CPU cost grows with N*r*p; the limit is 16 times what we write.
_MAX_SCRYPT_WORK = 16 * SCRYPT_N * SCRYPT_R * SCRYPT_P
_MAX_PBKDF2_ITERATIONS = 10_000_000
_OID_PBES2 = "1.2.840.113549.1.5.13"
_OID_PBKDF2 = "1.2.840.113549.1.5.12"
_OID_SCRYPT = "1.3.6.1.4.1.11591.4.11"


class _KdfTooCostly(ValueError):
    """The file's KDF parameters exceed the loader's limits."""


def _is_encrypted(der: bytes) -> bool:
    """Tell an ``EncryptedPrivateKeyInfo`` (first element a SEQUENCE) from a plain one."""
    outer = DerSequence().decode(der, strict=True)
    return len(outer) == 2 and not isinstance(outer[0], int)


def _check_kdf_cost(der: bytes) -> None:
    """Refuse PBES2 parameters whose KDF would cost more than the limits, before running it."""
    outer = DerSequence().decode(der, strict=True)
    algorithm = DerSequence().decode(outer[0], strict=True)
    if DerObjectId().decode(algorithm[0], strict=True).value != _OID_PBES2:
        raise _KdfTooCostly("only PBES2 envelopes are accepted")
    pbes2 = DerSequence().decode(algorithm[1], nr_elements=2, strict=True)
    kdf = DerSequence().decode(pbes2[0], nr_elements=2, strict=True)
    kdf_oid = DerObjectId().decode(kdf[0], strict=True).value
    params = DerSequence().decode(kdf[1], strict=True)
    if kdf_oid == _OID_SCRYPT:
        n, r, p = (int(params[i]) for i in (1, 2, 3))
        memory = 128 * r * (n + p)
        if min(n, r, p) < 1 or memory > _MAX_KDF_MEMORY or n * r * p > _MAX_SCRYPT_WORK:
            raise _KdfTooCostly(f"scrypt N={n}, r={r}, p={p} needs {memory} bytes")
    elif kdf_oid == _OID_PBKDF2:
        iterations = int(params[1])
        if not 1 <= iterations <= _MAX_PBKDF2_ITERATIONS:
            raise _KdfTooCostly(f"PBKDF2 iteration count {iterations}")
    else:
        raise _KdfTooCostly(f"unsupported key derivation {kdf_oid}")


def _sm2_params() -> DerObjectId:
    return DerObjectId(SM2_CURVE_OID)


def wrap_private_key_insecure(ec_private_key_der: bytes) -> bytes:
    """Wrap an ``ECPrivateKey`` in an *unencrypted* PKCS#8 ``PrivateKeyInfo``."""
    return bytes(PKCS8.wrap(ec_private_key_der, EC_PUBLIC_KEY_OID, key_params=_sm2_params()))


def wrap_private_key(ec_private_key_der: bytes, passphrase: bytes) -> bytes:
    """Wrap an ``ECPrivateKey`` in encrypted PKCS#8 (PBES2, scrypt, AES-256-CBC).

    Raises
    ------
    KeyExportRefused
        If ``passphrase`` is not bytes or is empty.
    """
    if not isinstance(passphrase, bytes):
        raise KeyExportRefused(f"passphrase must be bytes, not {type(passphrase).__name__}")
    if not passphrase:
        raise KeyExportRefused("passphrase is empty; refusing to export the private key")
    wrapped = PKCS8.wrap(
        ec_private_key_der,
        EC_PUBLIC_KEY_OID,
        passphrase,
        protection=PROTECTION,
        prot_params={
            "iteration_count": SCRYPT_N,
            "block_size": SCRYPT_R,
            "parallelization": SCRYPT_P,
        },
        key_params=_sm2_params(),
        randfunc=os.urandom,
    )
    return bytes(wrapped)


def unwrap_private_key(der: bytes, passphrase: bytes | None) -> tuple[int, bytes | None]:
    """Open a PKCS#8 SM2 key; return the scalar and the embedded public point (64 bytes).

    Raises
    ------
    KeyInvalid
        On oversize or malformed DER, a wrong passphrase, a KDF asking for more
        than the limits, or a key that is not an SM2 EC key.
    """
    if len(der) > _MAX_DER:
        raise KeyInvalid(f"private key DER is {len(der)} bytes; the limit is {_MAX_DER}")
    if passphrase is not None and not isinstance(passphrase, bytes):
        raise KeyInvalid(f"passphrase must be bytes, not {type(passphrase).__name__}")
    try:
        encrypted = _is_encrypted(der)
        if encrypted:
            if passphrase is None:
                raise KeyInvalid("private key is encrypted; a passphrase is required")
            _check_kdf_cost(der)
    except _KdfTooCostly as exc:
        raise KeyInvalid(f"private key KDF parameters exceed the limits ({exc})") from None
    except (ValueError, TypeError, IndexError) as exc:
        raise KeyInvalid(f"malformed PKCS#8 private key ({exc})") from None
    try:
        unwrapped = PKCS8.unwrap(der, passphrase if encrypted else None)
    except (ValueError, TypeError, IndexError) as exc:
        if encrypted:
            # pycryptodome reports a wrong passphrase as bad padding or as
            # undecodable plaintext; both mean the key cannot be opened.
            raise KeyInvalid("cannot decrypt the private key: wrong passphrase") from None
        raise KeyInvalid(f"malformed PKCS#8 private key ({exc})") from None
    oid, inner, params = unwrapped
    if oid != EC_PUBLIC_KEY_OID:
        raise KeyInvalid(f"private key algorithm is {oid}, not id-ecPublicKey (SM2)")
    try:
        curve = DerObjectId().decode(params, strict=True).value if params else None
    except ValueError:
        curve = None
    if curve != SM2_CURVE_OID:
        raise KeyInvalid("private key curve is not SM2 (1.2.156.10197.1.301)")
    return decode_ec_private_key(inner)
