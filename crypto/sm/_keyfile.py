"""PKCS#8 envelopes for SM2 private keys (RFC 5208, RFC 5958; PBES2 from RFC 8018).

Encrypted keys use PBES2 with scrypt (RFC 7914; N = 2^14, r = 8, p = 5, which
is OWASP's scrypt floor and stays within OpenSSL's 32 MiB scrypt memory cap,
so ``openssl pkey -passin`` reads them) and AES-256-CBC. pycryptodome does the
envelope; its KDF limits stop a crafted file from demanding hours of CPU or
gigabytes of memory when it is loaded.
"""

from __future__ import annotations

import os

from Crypto import IncorrectPassphraseError, KdfLimitError, PassphraseRequiredError
from Crypto.IO import PKCS8
from Crypto.Util.asn1 import DerObjectId

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


def _sm2_params() -> DerObjectId:
    return DerObjectId(SM2_CURVE_OID)


def wrap_private_key_insecure(ec_private_key_der: bytes) -> bytes:
    """Wrap an ``ECPrivateKey`` in an *unencrypted* PKCS#8 ``PrivateKeyInfo``."""
    return PKCS8.wrap(ec_private_key_der, EC_PUBLIC_KEY_OID, key_params=_sm2_params())


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
    return PKCS8.wrap(
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
        unwrapped = PKCS8.unwrap(der, passphrase, max_memory=_MAX_KDF_MEMORY)
    except IncorrectPassphraseError:
        raise KeyInvalid("cannot decrypt the private key: wrong passphrase") from None
    except PassphraseRequiredError:
        raise KeyInvalid("private key is encrypted; a passphrase is required") from None
    except KdfLimitError as exc:
        raise KeyInvalid(f"private key KDF parameters exceed the limits ({exc})") from None
    except (ValueError, TypeError, IndexError) as exc:
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
