r"""Signed tree heads as C2SP checkpoints, signed with SM2 (GB/T 32918, explicit ID, DER).

The checkpoint body follows the C2SP ``tlog-checkpoint`` specification
(https://c2sp.org/tlog-checkpoint)::

    <origin>\n
    <tree size, decimal>\n
    <base64(root hash)>\n

The signature is a plain DER SM2-with-SM3 signature over those exact bytes
with the standard ID ``1234567812345678``, so an auditor verifies a head with
OpenSSL alone::

    openssl dgst -sm3 -verify pub.pem -signature head.sig \
        -sigopt distid:1234567812345678 head.txt

(The C2SP *signed-note* envelope has no SM2 algorithm; the body and the DER
signature are stored and shipped side by side instead.)
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from datetime import datetime

from crypto import SignatureInvalid
from crypto.sm import DEFAULT_SM2_ID, SM2PrivateKey, SM2PublicKey
from privacy_ledger.errors import (
    AuditParameterInvalid,
    CheckpointMalformed,
    CheckpointSignatureInvalid,
)

__all__ = ["Checkpoint", "SignedTreeHead", "parse_checkpoint", "sign_checkpoint", "verify_head"]

MAX_BODY_BYTES = 1024
MAX_SIGNATURE_BYTES = 80
_SIZE = re.compile(rb"^(0|[1-9][0-9]{0,19})$")


def check_origin(origin: str) -> str:
    """Return ``origin`` if it is a valid checkpoint origin line, else raise.

    Raises
    ------
    AuditParameterInvalid
        When it is empty, longer than 255 bytes, or has control characters or
        surrounding whitespace.
    """
    if (
        not isinstance(origin, str)
        or not origin
        or origin != origin.strip()
        or len(origin.encode("utf-8", "replace")) > 255
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in origin)
    ):
        raise AuditParameterInvalid(
            f"origin: {origin!r} must be one non-empty line (<= 255 bytes), like 'example.org/log'"
        )
    return origin


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """An unsigned tree head: log origin, tree size and root hash."""

    origin: str
    tree_size: int
    root_hash: bytes

    def body(self) -> bytes:
        """Return the C2SP checkpoint body bytes."""
        check_origin(self.origin)
        if self.tree_size < 0:
            raise AuditParameterInvalid(f"tree_size: {self.tree_size} is negative")
        root = base64.b64encode(self.root_hash).decode("ascii")
        return f"{self.origin}\n{self.tree_size}\n{root}\n".encode()


def parse_checkpoint(body: bytes, *, hash_size: int = 32) -> Checkpoint:
    r"""Parse untrusted checkpoint bytes.

    Raises
    ------
    CheckpointMalformed
        When the bytes are not exactly ``origin\nsize\nbase64(root)\n``.
    """
    if not isinstance(body, bytes) or len(body) > MAX_BODY_BYTES:
        raise CheckpointMalformed(f"body: must be bytes of at most {MAX_BODY_BYTES}")
    if not body.endswith(b"\n"):
        raise CheckpointMalformed("body: must end with a newline")
    lines = body[:-1].split(b"\n")
    if len(lines) != 3:
        raise CheckpointMalformed(f"body: want 3 lines (origin, size, root), got {len(lines)}")
    raw_origin, raw_size, raw_root = lines
    try:
        origin = check_origin(raw_origin.decode("utf-8"))
    except (UnicodeDecodeError, AuditParameterInvalid):
        raise CheckpointMalformed("origin: not a valid origin line") from None
    if not _SIZE.match(raw_size) or int(raw_size) >= 1 << 64:
        raise CheckpointMalformed(f"size: {raw_size!r} is not a decimal uint64")
    try:
        root = base64.b64decode(raw_root, validate=True)
    except binascii.Error:
        raise CheckpointMalformed("root: not standard base64") from None
    if len(root) != hash_size or base64.b64encode(root) != raw_root:
        raise CheckpointMalformed(f"root: want {hash_size} bytes in canonical base64")
    return Checkpoint(origin=origin, tree_size=int(raw_size), root_hash=root)


@dataclass(frozen=True, kw_only=True)
class SignedTreeHead:
    """A checkpoint body with its DER SM2 signature, as stored in ``tree_heads``.

    Attributes
    ----------
    checkpoint
        The parsed body.
    body
        The exact signed bytes.
    signature
        DER SM2-with-SM3 signature over ``body`` (ID ``1234567812345678``).
    key_fingerprint
        Hex SM3 of the signer's DER SubjectPublicKeyInfo.
    signed_at
        When the log signed it (informational; not covered by the signature).
    """

    checkpoint: Checkpoint
    body: bytes
    signature: bytes
    key_fingerprint: str
    signed_at: datetime | None = field(default=None, compare=False)

    @property
    def origin(self) -> str:
        """Log origin line."""
        return self.checkpoint.origin

    @property
    def tree_size(self) -> int:
        """Number of entries the head commits to."""
        return self.checkpoint.tree_size

    @property
    def root_hash(self) -> bytes:
        """Merkle root of the first ``tree_size`` entries."""
        return self.checkpoint.root_hash


def sign_checkpoint(
    checkpoint: Checkpoint, signer: SM2PrivateKey, *, signed_at: datetime | None = None
) -> SignedTreeHead:
    """Sign ``checkpoint`` with SM2 (SM3, default ID, DER) and return the signed head."""
    body = checkpoint.body()
    signature = signer.sign(body, distid=DEFAULT_SM2_ID)
    return SignedTreeHead(
        checkpoint=checkpoint,
        body=body,
        signature=signature,
        key_fingerprint=signer.public_key.fingerprint(),
        signed_at=signed_at,
    )


def verify_head(
    body: bytes,
    signature: bytes,
    public_key: SM2PublicKey,
    *,
    origin: str | None = None,
    hash_size: int = 32,
) -> Checkpoint:
    """Verify a signed head and return its parsed checkpoint.

    Parameters
    ----------
    body, signature
        Untrusted checkpoint bytes and DER signature.
    public_key
        The log's SM2 public key.
    origin
        When given, the checkpoint's origin must equal it.

    Raises
    ------
    CheckpointSignatureInvalid
        When the signature is oversized or does not verify.
    CheckpointMalformed
        When the body is not a checkpoint, or is for another origin.
    """
    if not isinstance(signature, bytes) or not 0 < len(signature) <= MAX_SIGNATURE_BYTES:
        raise CheckpointSignatureInvalid(f"signature: want 1..{MAX_SIGNATURE_BYTES} DER bytes")
    checkpoint = parse_checkpoint(body, hash_size=hash_size)
    try:
        public_key.verify(body, signature, distid=DEFAULT_SM2_ID)
    except SignatureInvalid as exc:
        raise CheckpointSignatureInvalid(
            f"signature: head of size {checkpoint.tree_size} does not verify ({exc.message})"
        ) from None
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointMalformed(f"origin: head is for {checkpoint.origin!r}, want {origin!r}")
    return checkpoint
