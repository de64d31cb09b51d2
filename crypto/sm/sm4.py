"""SM4 authenticated encryption: SM4-GCM (GB/T 32907-2016 block cipher, RFC 8998 mode).

Only an AEAD is exposed, on purpose: raw SM4-ECB/CBC would give neither
integrity nor safe defaults. Each message gets a fresh 96-bit nonce from
:func:`os.urandom`; the wire format is ``nonce (12) || ciphertext || tag (16)``.
Associated data is required (it may be ``b""`` if the caller says so).

Notes
-----
With random 96-bit nonces, NIST SP 800-38D section 8.3 bounds one key to
2^32 messages; rotate keys well before that. The cipher comes from the
``cryptography`` package (OpenSSL); OpenSSL 3.0 alone has no SM4-GCM.
"""

from __future__ import annotations

import os
import secrets
from typing import NoReturn

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from crypto.errors import DecryptionFailed, KeyInvalid, ParameterInvalid

__all__ = ["SM4GCM"]

KEY_SIZE = 16
NONCE_SIZE = 12
TAG_SIZE = 16
OVERHEAD = NONCE_SIZE + TAG_SIZE
MAX_PLAINTEXT = (1 << 36) - 32  # GCM limit, NIST SP 800-38D section 5.2.1.1


def _as_bytes(value: object, name: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ParameterInvalid(f"{name} must be bytes, not {type(value).__name__}")
    return bytes(value)


class SM4GCM:
    """SM4-GCM with a 128-bit key; nonces are generated internally.

    Parameters
    ----------
    key
        16 secret bytes, e.g. from :meth:`generate_key`.

    Raises
    ------
    KeyInvalid
        If ``key`` is not 16 bytes.

    Examples
    --------
    >>> aead = SM4GCM(SM4GCM.generate_key())
    >>> blob = aead.encrypt(b"scores", associated_data=b"round 7")
    >>> aead.decrypt(blob, associated_data=b"round 7")
    b'scores'
    """

    __slots__ = ("__key",)

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes | bytearray):
            raise KeyInvalid(f"key must be bytes, not {type(key).__name__}")
        if len(key) != KEY_SIZE:
            raise KeyInvalid(f"key must be {KEY_SIZE} bytes, got {len(key)}")
        self.__key = bytes(key)

    @staticmethod
    def generate_key() -> bytes:
        """Return a fresh 16-byte key from :mod:`secrets`."""
        return secrets.token_bytes(KEY_SIZE)

    def encrypt(self, plaintext: bytes, *, associated_data: bytes) -> bytes:
        """Encrypt and authenticate; return ``nonce || ciphertext || tag``.

        Parameters
        ----------
        plaintext
            Bytes to protect.
        associated_data
            Context bound to the ciphertext but not encrypted (round id, sender,
            purpose). Required; pass ``b""`` explicitly if there is none.

        Raises
        ------
        ParameterInvalid
            If an argument is not bytes or the plaintext exceeds the GCM limit.
        """
        data = _as_bytes(plaintext, "plaintext")
        aad = _as_bytes(associated_data, "associated_data")
        if len(data) > MAX_PLAINTEXT:
            raise ParameterInvalid("plaintext exceeds the GCM limit of 2^36 - 32 bytes")
        nonce = os.urandom(NONCE_SIZE)
        return nonce + self._encrypt_with_nonce(nonce, data, aad)

    def _encrypt_with_nonce(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        encryptor = Cipher(algorithms.SM4(self.__key), modes.GCM(nonce)).encryptor()
        encryptor.authenticate_additional_data(aad)
        body = encryptor.update(data) + encryptor.finalize()
        return body + encryptor.tag

    def decrypt(self, blob: bytes, *, associated_data: bytes) -> bytes:
        """Check and decrypt ``nonce || ciphertext || tag``.

        Raises
        ------
        DecryptionFailed
            If the blob is too short, or the key, associated data or any byte
            does not match. No plaintext is released.
        ParameterInvalid
            If an argument is not bytes.
        """
        data = _as_bytes(blob, "blob")
        aad = _as_bytes(associated_data, "associated_data")
        if len(data) < OVERHEAD:
            raise DecryptionFailed(f"ciphertext is {len(data)} bytes; at least {OVERHEAD}")
        if len(data) > MAX_PLAINTEXT + OVERHEAD:
            raise DecryptionFailed("ciphertext exceeds the GCM limit")
        nonce, body, tag = data[:NONCE_SIZE], data[NONCE_SIZE:-TAG_SIZE], data[-TAG_SIZE:]
        decryptor = Cipher(algorithms.SM4(self.__key), modes.GCM(nonce, tag)).decryptor()
        decryptor.authenticate_additional_data(aad)
        plain = decryptor.update(body)
        try:
            decryptor.finalize()
        except InvalidTag:
            raise DecryptionFailed(
                "authentication failed: wrong key, wrong associated data or altered bytes"
            ) from None
        return plain

    def __repr__(self) -> str:
        return "SM4GCM(key=<hidden>)"

    def __reduce__(self) -> NoReturn:
        raise TypeError("SM4GCM holds a secret key and cannot be pickled or copied")
