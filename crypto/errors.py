"""Typed errors of the ``crypto`` layer, each with a stable code.

Every error raised by this package derives from :class:`CryptoError` and
carries a ``code`` that never changes once published: the REST layer maps
codes to HTTP statuses in one place, and ``docs/audit/error-codes.md`` has a
row for each (a test fails when one is missing).

Foreign exceptions (TenSEAL, gmssl, ``cryptography``) are translated at the
boundary into one of these; callers never see a library's own exception.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "CryptoError",
    "ParameterInvalid",
    "KeyInvalid",
    "KeyExportRefused",
    "SignatureInvalid",
    "DecryptionFailed",
    "CiphertextRejected",
    "ContextMismatch",
    "ShareTampered",
    "EncodingOverflow",
    "SharesOutOfRange",
    "ReleaseLimitReached",
    "AggregateInconsistent",
]


class CryptoError(Exception):
    """Base of every error raised by the ``crypto`` package.

    Parameters
    ----------
    message
        Human-readable explanation naming what was wrong. It must never
        contain key material, shares or plaintext values.
    """

    code: ClassVar[str] = "CRYPTO_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class ParameterInvalid(CryptoError):
    """A caller passed an argument outside its documented range or set."""

    code = "CRYPTO_PARAMETER_INVALID"


class KeyInvalid(CryptoError):
    """Key material could not be parsed, is not on the curve, or is out of range."""

    code = "CRYPTO_KEY_INVALID"


class KeyExportRefused(CryptoError):
    """Secret-key export was asked for without the explicit protections it needs."""

    code = "CRYPTO_KEY_EXPORT_REFUSED"


class SignatureInvalid(CryptoError):
    """A signature is malformed or does not verify for the given key and message."""

    code = "CRYPTO_SIGNATURE_INVALID"


class DecryptionFailed(CryptoError):
    """Authenticated decryption failed: wrong key, wrong associated data or tampering."""

    code = "CRYPTO_DECRYPTION_FAILED"


class CiphertextRejected(CryptoError):
    """Untrusted ciphertext bytes failed validation (size, parse, scale, level, count)."""

    code = "CRYPTO_CIPHERTEXT_REJECTED"


class ContextMismatch(CryptoError):
    """A ciphertext or context does not belong to the expected key epoch/fingerprint."""

    code = "CRYPTO_CONTEXT_MISMATCH"


class ShareTampered(CryptoError):
    """A secret share or its authentication tag does not match what was dealt."""

    code = "CRYPTO_SHARE_TAMPERED"


class EncodingOverflow(CryptoError):
    """A value is outside the public clip bound of the fixed-point ring codec."""

    code = "CRYPTO_ENCODING_OVERFLOW"


class SharesOutOfRange(CryptoError):
    """A range check on shares found a value outside the public bound (values never named)."""

    code = "CRYPTO_SHARES_OUT_OF_RANGE"


class ReleaseLimitReached(CryptoError):
    """A key epoch released the decryptions its preset's noise flooding was sized for."""

    code = "CRYPTO_RELEASE_LIMIT_REACHED"


class AggregateInconsistent(CryptoError):
    """A publication is not the weighted sum of the values that were scored, or leaves the bound.

    Raised by :func:`crypto.ckks.decrypt_checked_publication` before anything is released:
    the publication epoch's weighted sum and the scoring epoch's weighted sum of the same
    uploads with the same weights (the witness) differ beyond their stated CKKS and flooding
    error, or a published value lies outside the preset's public input bound. The message
    names neither values nor cells.
    """

    code = "CRYPTO_AGGREGATE_INCONSISTENT"


class MacCheckFailed(CryptoError):
    """An opened value does not match its information-theoretic MAC (``crypto.shares.mac``).

    A party's share of the value, of its MAC or of the check value was offset (or the
    commitment to the check value does not open): nothing may be released from this
    opening. The message names the opening's label, never a value.
    """

    code = "CRYPTO_MAC_CHECK_FAILED"
