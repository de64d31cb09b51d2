"""The one way a CKKS secret key leaves memory: SM4-GCM-sealed export and import.

The blob is ``header || SM4-GCM(private context)``; the header is the GCM
associated data, so any change to it fails authentication. The 128-bit SM4 key
is either supplied by the caller (e.g. from an HSM or a KMS) or derived from a
passphrase with Argon2id (RFC 9106), memory-hard, with the parameters stored in
the header so that they can be raised later without breaking old blobs.

Wire format (all integers big-endian)::

    magic "SFCKSK1" (7) | kdf (1: 0 caller key, 1 argon2id) | t_cost (4) |
    m_cost KiB (4) | parallelism (1) | salt (16) | preset wire id (1) |
    public-context SM3 fingerprint (32) |
    SM4-GCM(u32 length | private context (secret + public key) | public context)

The public context (with the evaluation keys) travels inside the sealed blob:
TenSEAL does not serialize evaluation keys next to a secret key, and generating
new ones would change the epoch's fingerprint.
"""

from __future__ import annotations

import hmac
import logging
import os
import struct

from argon2.low_level import Type, hash_secret_raw

from crypto.ckks import _tenseal
from crypto.ckks.keys import KeyAuthorityKeys, _keys_from_context, _private_context
from crypto.ckks.presets import preset_by_wire_id
from crypto.errors import ContextMismatch, DecryptionFailed, KeyExportRefused, KeyInvalid
from crypto.sm import SM4GCM

__all__ = [
    "ARGON2_MEMORY_KIB",
    "ARGON2_PARALLELISM",
    "ARGON2_TIME_COST",
    "export_secret_key_encrypted",
    "import_secret_key_encrypted",
]

logger = logging.getLogger(__name__)

MAGIC = b"SFCKSK1"
ARGON2_TIME_COST = 3
"""Argon2id passes (RFC 9106 section 4, second recommended option)."""
ARGON2_MEMORY_KIB = 64 * 1024
"""Argon2id memory: 64 MiB (RFC 9106 section 4, second recommended option)."""
ARGON2_PARALLELISM = 1
"""Argon2id lanes; 1 keeps the cost on 2-core hosts predictable."""
MIN_PASSPHRASE_CHARS = 12
_HEADER = struct.Struct(">7sBIIB16sB32s")
_LEN = struct.Struct(">I")
_KDF_KEY, _KDF_ARGON2 = 0, 1
MAX_BLOB_BYTES = 256 << 20


def _derive(passphrase: str, salt: bytes, t_cost: int, m_cost: int, lanes: int) -> bytes:
    return hash_secret_raw(
        passphrase.encode("utf-8"),
        salt,
        time_cost=t_cost,
        memory_cost=m_cost,
        parallelism=lanes,
        hash_len=16,
        type=Type.ID,
    )


def _choose_key(passphrase: str | None, key: bytes | None) -> None:
    if (passphrase is None) == (key is None):
        raise KeyExportRefused("give exactly one of passphrase= or key= to protect the secret key")
    if passphrase is not None:
        if not isinstance(passphrase, str) or len(passphrase) < MIN_PASSPHRASE_CHARS:
            raise KeyExportRefused(
                f"passphrase must be a string of at least {MIN_PASSPHRASE_CHARS} characters"
            )
    elif not isinstance(key, bytes) or len(key) != 16:
        raise KeyExportRefused("key must be 16 bytes (an SM4 key)")


def _log_export(epoch: str, *, passphrase: bool) -> None:
    """Say what left memory, sealed how, for whom, and why that is safe.

    WARNING, not INFO: this module cannot tell a planned export (a key ceremony
    writing the key authority's directory, a backup) from an unplanned one, and a
    secret key leaving memory is what an operator must see at the default level.
    """
    under = (
        "a key derived from a passphrase (Argon2id, 64 MiB)"
        if passphrase
        else "a 16-byte SM4 seal key the caller holds"
    )
    logger.warning(
        "CKKS secret key of key epoch %s serialized for the key authority only, sealed with "
        "SM4-GCM under %s: the blob reveals nothing and cannot be altered without that key "
        "(expected in a key ceremony or a key backup; no other party ever receives it)",
        epoch,
        under,
    )


def export_secret_key_encrypted(
    keys: KeyAuthorityKeys, *, passphrase: str | None = None, key: bytes | None = None
) -> bytes:
    """Export the key authority's secret key, sealed with SM4-GCM.

    Parameters
    ----------
    keys
        The key set to export (secret key, public key and evaluation keys).
    passphrase
        At least 12 characters; stretched with Argon2id (t=3, 64 MiB, 1 lane).
    key
        Alternatively, a caller-held 16-byte SM4 key.

    Returns
    -------
    bytes
        The sealed blob; see the module docstring for its layout.

    Raises
    ------
    KeyExportRefused
        Neither or both protections given, a short passphrase or a bad key.
    """
    _choose_key(passphrase, key)
    ctx = _private_context(keys)
    salt = os.urandom(16)
    if passphrase is not None:
        kdf, t_cost, m_cost, lanes = _KDF_ARGON2, ARGON2_TIME_COST, ARGON2_MEMORY_KIB, 1
        aead_key = _derive(passphrase, salt, t_cost, m_cost, lanes)
    else:
        kdf, t_cost, m_cost, lanes = _KDF_KEY, 0, 0, 0
        aead_key = bytes(key or b"")
    header = _HEADER.pack(
        MAGIC, kdf, t_cost, m_cost, lanes, salt, keys.preset.wire_id, keys.fingerprint
    )
    private = bytes(
        ctx.serialize(
            save_public_key=True,
            save_secret_key=True,
            save_galois_keys=False,
            save_relin_keys=False,
        )
    )
    secret = _LEN.pack(len(private)) + private + keys.public_context.data
    _log_export(keys.fingerprint.hex()[:16], passphrase=passphrase is not None)
    return header + SM4GCM(aead_key).encrypt(secret, associated_data=header)


def import_secret_key_encrypted(
    blob: bytes, *, passphrase: str | None = None, key: bytes | None = None
) -> KeyAuthorityKeys:
    """Open a blob made by :func:`export_secret_key_encrypted`.

    Raises
    ------
    KeyInvalid
        Malformed, oversized or unknown-preset blob, or no secret key inside.
    DecryptionFailed
        Wrong passphrase or key, or altered bytes (GCM authentication).
    ContextMismatch
        The restored key set does not reproduce the fingerprint in the header.
    KeyExportRefused
        Neither or both of ``passphrase`` and ``key`` given.
    """
    if not isinstance(blob, bytes) or not _HEADER.size < len(blob) <= MAX_BLOB_BYTES:
        raise KeyInvalid("secret-key blob has the wrong type or size")
    if passphrase is not None and not isinstance(passphrase, str):
        raise KeyExportRefused("passphrase must be a string")
    if key is not None and (not isinstance(key, bytes) or len(key) != 16):
        raise KeyExportRefused("key must be 16 bytes (an SM4 key)")
    if (passphrase is None) == (key is None):
        raise KeyExportRefused("give exactly one of passphrase= or key=")
    header = blob[: _HEADER.size]
    magic, kdf, t_cost, m_cost, lanes, salt, wire_id, fingerprint = _HEADER.unpack(header)
    preset = preset_by_wire_id(wire_id)
    if magic != MAGIC or preset is None or kdf not in (_KDF_KEY, _KDF_ARGON2):
        raise KeyInvalid("not a secure-fed CKKS secret-key blob (magic, preset or KDF byte)")
    if kdf == _KDF_ARGON2:
        if passphrase is None:
            raise DecryptionFailed("this blob is protected by a passphrase, not a raw key")
        if not (1 <= t_cost <= 16 and 8 * lanes <= m_cost <= 1 << 21 and 1 <= lanes <= 8):
            raise KeyInvalid("Argon2id parameters in the blob are out of range")
        aead_key = _derive(passphrase, salt, t_cost, m_cost, lanes)
    else:
        if key is None:
            raise DecryptionFailed("this blob is protected by a raw key, not a passphrase")
        aead_key = key
    secret = SM4GCM(aead_key).decrypt(blob[_HEADER.size :], associated_data=header)
    (size,) = _LEN.unpack_from(secret) if len(secret) >= _LEN.size else (len(secret),)
    if not 0 < size < len(secret) - _LEN.size:
        raise KeyInvalid("sealed key set is malformed (length prefix)")
    private, public = secret[_LEN.size : _LEN.size + size], secret[_LEN.size + size :]
    try:
        ctx = _tenseal.load_context(private)
    except Exception as exc:  # authenticated bytes that still fail to parse
        raise KeyInvalid(f"sealed key set does not parse: {type(exc).__name__}") from None
    keys = _keys_from_context(ctx, preset, public)
    if not hmac.compare_digest(keys.fingerprint, fingerprint):
        raise ContextMismatch("restored key set does not match the fingerprint it was sealed with")
    return keys
