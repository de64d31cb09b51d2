"""Sealed evidence fields of audit entries: SM4-GCM (GB/T 32907, RFC 8998) with bound context.

A sensitive value is canonical-JSON encoded and encrypted under the evidence
key (separate from the log's signing key). The associated data binds the
ciphertext to its log, entry index and field name, so a blob copied to another
entry or field does not open. The stored form is
``base64(nonce || ciphertext || tag)``; the Merkle leaf hashes it as stored, so
the log verifies without the evidence key.
"""

from __future__ import annotations

import base64
import binascii

from crypto import DecryptionFailed
from crypto.sm import SM4GCM
from privacy_ledger.audit import canonical
from privacy_ledger.errors import EvidenceUnreadable

__all__ = ["evidence_associated_data", "seal", "unseal"]

_CONTEXT = "secure-fed/audit-evidence/v1"


def evidence_associated_data(origin: str, index: int, field: str) -> bytes:
    """Return the associated data binding a sealed field to its log, entry and name."""
    return canonical.encode([_CONTEXT, origin, index, field])


def seal(key: SM4GCM, *, origin: str, index: int, field: str, plaintext: bytes) -> str:
    """Encrypt canonical ``plaintext`` for ``field`` of entry ``index``; return base64."""
    blob = key.encrypt(plaintext, associated_data=evidence_associated_data(origin, index, field))
    return base64.b64encode(blob).decode("ascii")


def unseal(key: SM4GCM, *, origin: str, index: int, field: str, sealed: str) -> object:
    """Decrypt a stored sealed field and return its value.

    Raises
    ------
    EvidenceUnreadable
        When the blob is not base64, or authentication fails (wrong key,
        altered bytes, or a blob moved from another entry or field).
    """
    try:
        blob = base64.b64decode(sealed, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise EvidenceUnreadable(f"field: {field!r} of entry {index} is not base64") from None
    aad = evidence_associated_data(origin, index, field)
    try:
        plaintext = key.decrypt(blob, associated_data=aad)
    except DecryptionFailed:
        raise EvidenceUnreadable(
            f"field: {field!r} of entry {index} failed SM4-GCM authentication"
        ) from None
    return canonical.decode(plaintext)
