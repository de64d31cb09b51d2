"""Signed upload envelopes: SM2 over SM3 of the canonical header and the upload digest.

Frame (big-endian)::

    envelope = b"SFSE" | u8 version=1 | u32 header_len | header JSON
               | u16 sig_len | DER signature | upload bytes
               (``secure_fed.federation.messages`` SFUP)

The envelope header is canonical JSON with the round id, participant id, mode,
the cryptographic parameters (``CKKS_SCORING``, ``Z2^64/f12`` or ``float32``),
the upload size and the upload's SM3 digest. The signature (GB/T 32918 SM2
with the standard ID, over GB/T 32905 SM3) covers
``SM3(header JSON) || SM3(upload)``; the upload itself carries the nonce, the
schema hash and the payload digest, so one signature binds all of them.

:class:`EnvelopeVerifier` validates in the order of issue 5: size limits,
signature, then hands the inner upload to the round engine, which checks round
and replay, schema, and the mode's crypto checks. Every rejection raises a
typed error and writes an ``upload.rejected`` audit event; a rejected upload
never touches the round.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Mapping

from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey, sm3_digest
from secure_fed.errors import (
    SecureFedError,
    UploadMalformed,
    UploadParticipantUnknown,
    UploadSignatureInvalid,
)
from secure_fed.federation.messages import decode_upload
from secure_fed.secure.scoring.outlier import AuditSink

__all__ = ["EnvelopeVerifier", "seal_upload"]

_log = logging.getLogger(__name__)

MAGIC = b"SFSE"
VERSION = 1
_MAX_HEADER = 4096
_MAX_SIG = 80  # DER SM2 signatures are at most 72 bytes


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _signed_message(head: bytes, upload: bytes) -> bytes:
    return sm3_digest(head) + sm3_digest(upload)


def seal_upload(upload: bytes, *, key: SM2PrivateKey, params: str) -> bytes:
    """Wrap upload bytes in a signed envelope (participant side).

    Parameters
    ----------
    upload
        ``SFUP`` bytes from :func:`secure_fed.federation.messages.encode_upload`.
    key
        The participant's SM2 signing key.
    params
        The crypto parameters of the payload (CKKS preset, ring, or ``float32``).
    """
    header, _ = decode_upload(upload, max_bytes=len(upload))
    head = _canonical({"round_id": header.round_id, "participant_id": header.participant_id,
                       "mode": header.mode, "params": params, "upload_bytes": len(upload),
                       "upload_sm3": sm3_digest(upload).hex()})  # fmt: skip
    sig = key.sign(_signed_message(head, upload))
    return b"".join((MAGIC, struct.pack(">BI", VERSION, len(head)), head,
                     struct.pack(">H", len(sig)), sig, upload))  # fmt: skip


class EnvelopeVerifier:
    """Aggregator-side gate in front of :meth:`RoundEngine.submit`.

    Parameters
    ----------
    keys
        Registered SM2 public key per participant id.
    submit
        ``submit(upload_bytes, round_id=...)`` of the round engine.
    params
        The crypto parameters this round's mode requires.
    max_bytes
        Refuse larger envelopes before parsing anything.
    audit
        Sink of ``upload.rejected`` events.
    """

    def __init__(self, *, keys: Mapping[str, SM2PublicKey], submit: Callable[..., str],
                 params: str, max_bytes: int, audit: AuditSink | None = None) -> None:  # fmt: skip
        self.keys, self.submit, self.params = dict(keys), submit, params
        self.max_bytes, self.audit = max_bytes, audit

    def accept(self, envelope: bytes, *, round_id: int) -> str:
        """Validate and submit; return the sender id.

        Raises
        ------
        UploadMalformed, UploadParticipantUnknown, UploadSignatureInvalid
            From the envelope checks; then whatever the round engine raises.
        """
        try:
            head, upload = self._verify(envelope)
            return self.submit(upload, round_id=round_id)
        except SecureFedError as exc:
            _log.warning("upload rejected: %s", exc)
            if self.audit is not None:
                self.audit.record("upload.rejected", {"round_id": round_id, "code": exc.code,
                                                      "reason": exc.message,
                                                      "bytes": len(envelope)})
            raise

    def _verify(self, data: bytes) -> tuple[dict[str, object], bytes]:
        if not isinstance(data, bytes) or len(data) > self.max_bytes:
            raise UploadMalformed(f"envelope must be bytes of at most {self.max_bytes} bytes")
        if len(data) < 11 or data[:4] != MAGIC or data[4] != VERSION:
            raise UploadMalformed("envelope does not start with the b'SFSE' v1 frame")
        (head_len,) = struct.unpack(">I", data[5:9])
        if head_len > _MAX_HEADER or 9 + head_len + 2 > len(data):
            raise UploadMalformed(f"envelope header length {head_len} is out of range")
        raw_head = data[9 : 9 + head_len]
        (sig_len,) = struct.unpack(">H", data[9 + head_len : 11 + head_len])
        start = 11 + head_len
        if sig_len > _MAX_SIG or start + sig_len > len(data):
            raise UploadSignatureInvalid(f"envelope signature length {sig_len} is out of range")
        sig, upload = data[start : start + sig_len], data[start + sig_len :]
        try:
            head = json.loads(raw_head.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UploadMalformed(f"envelope header is not JSON: {exc}") from None
        if not isinstance(head, dict) or raw_head != _canonical(head):
            raise UploadMalformed("envelope header must be canonical JSON")
        pid = head.get("participant_id")
        if pid not in self.keys:
            raise UploadParticipantUnknown(f"participant {pid!r} has no registered SM2 key")
        try:
            self.keys[str(pid)].verify(_signed_message(raw_head, upload), sig)
        except CryptoError as exc:
            raise UploadSignatureInvalid(f"signature of {pid!r} does not verify: {exc}") from None
        self._check_binding(head, upload)
        return head, upload

    def _check_binding(self, head: dict[str, object], upload: bytes) -> None:
        digest = sm3_digest(upload).hex()
        if head.get("upload_bytes") != len(upload) or head.get("upload_sm3") != digest:
            raise UploadMalformed("envelope size or digest does not match the upload")
        if head.get("params") != self.params:
            raise UploadMalformed(f"envelope params {head.get('params')!r} are not {self.params!r}")
        inner, _ = decode_upload(upload, max_bytes=self.max_bytes)
        for name in ("round_id", "participant_id", "mode"):
            if head.get(name) != getattr(inner, name):
                raise UploadMalformed(f"envelope {name} differs from the upload header")
