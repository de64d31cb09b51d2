"""Cryptographic building blocks of secure-fed; imports nothing of ours.

Subpackages
-----------
crypto.ckks
    CKKS (TenSEAL) presets, key handles, class-major packing, validated loading.
crypto.shares
    Fixed-point ring codec over Z_2^64, additive shares, PRG seeds, Beaver triples.
crypto.sm
    SM2 signatures, SM3 hashing, SM4 authenticated encryption (GB/T 32918, 32905, 32907).
"""

from crypto.errors import (
    CiphertextRejected,
    ContextMismatch,
    CryptoError,
    DecryptionFailed,
    EncodingOverflow,
    KeyExportRefused,
    KeyInvalid,
    ParameterInvalid,
    ShareTampered,
    SignatureInvalid,
)

__all__ = [
    "CiphertextRejected",
    "ContextMismatch",
    "CryptoError",
    "DecryptionFailed",
    "EncodingOverflow",
    "KeyExportRefused",
    "KeyInvalid",
    "ParameterInvalid",
    "ShareTampered",
    "SignatureInvalid",
]
