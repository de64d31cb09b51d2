"""Signed upload envelopes: SM2 over SM3 of the canonical header and the upload digest.

An envelope is an ``envelope`` frame of :mod:`secure_fed.wire` (``SFSE``)::

    header  = canonical JSON: round_id, participant_id, mode, params,
              upload_bytes, upload_sm3
    payload = u16 sig_len | DER SM2 signature | upload frame (``SFUP``)

``params`` names the cryptographic parameters of the payload (``CKKS_SCORING``,
``Z2^64/f12`` or ``float32``). The signature (GB/T 32918 SM2 with the standard
ID, over GB/T 32905 SM3) covers ``SM3(header bytes) || SM3(upload)``; the upload
header inside carries the nonce, the schema hash and the payload digest, so
one signature binds all of them. The header bytes are exactly those the wire
module writes, and a receiver refuses any that are not canonical, so the
signed bytes are unambiguous.

:class:`EnvelopeVerifier` checks in this order: size limit, framing, registered
sender, signature, binding of the header to the upload and to the round's
parameters; then it hands the inner upload to the round engine, which checks
round and replay, schema, and the mode's crypto checks. Every rejection raises
a typed error and writes an ``upload.rejected`` audit event; a rejected upload
never touches the round.
"""

from __future__ import annotations

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
from secure_fed.secure.audit import AuditSink
from secure_fed.wire import ENVELOPE, decode_frame, encode_frame, encode_header

__all__ = ["EnvelopeVerifier", "seal_upload"]

_log = logging.getLogger(__name__)

_SIG_LEN = struct.Struct(">H")
_MAX_SIG = 80  # DER SM2 signatures are at most 72 bytes


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

    Raises
    ------
    UploadMalformed
        If ``upload`` is not a valid upload frame.
    """
    header, _ = decode_upload(upload, max_bytes=len(upload))
    fields: dict[str, object] = {
        "round_id": header.round_id,
        "participant_id": header.participant_id,
        "mode": header.mode,
        "params": params,
        "upload_bytes": len(upload),
        "upload_sm3": sm3_digest(upload).hex(),
    }
    sig = key.sign(_signed_message(encode_header(ENVELOPE, fields), upload))
    return encode_frame(ENVELOPE, fields, _SIG_LEN.pack(len(sig)) + sig + upload)


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

    def __init__(
        self,
        *,
        keys: Mapping[str, SM2PublicKey],
        submit: Callable[..., str],
        params: str,
        max_bytes: int,
        audit: AuditSink | None = None,
    ) -> None:
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
                details = {"round_id": round_id, "code": exc.code, "reason": exc.message}
                self.audit.record("upload.rejected", {**details, "bytes": len(envelope)})
            raise

    def _verify(self, data: bytes) -> tuple[dict[str, object], bytes]:
        if not isinstance(data, bytes) or len(data) > self.max_bytes:
            raise UploadMalformed(f"envelope must be bytes of at most {self.max_bytes} bytes")
        head, payload = decode_frame(data, ENVELOPE, max_bytes=self.max_bytes)
        if len(payload) < _SIG_LEN.size:
            raise UploadSignatureInvalid("envelope is truncated before the signature length")
        (sig_len,) = _SIG_LEN.unpack_from(payload)
        start = _SIG_LEN.size
        if sig_len > _MAX_SIG or start + sig_len > len(payload):
            raise UploadSignatureInvalid(f"envelope signature length {sig_len} is out of range")
        sig, upload = payload[start : start + sig_len], payload[start + sig_len :]
        pid = head.get("participant_id")
        if not isinstance(pid, str) or pid not in self.keys:
            raise UploadParticipantUnknown(f"participant {pid!r} has no registered SM2 key")
        signed = _signed_message(encode_header(ENVELOPE, head), upload)
        try:
            self.keys[pid].verify(signed, sig)
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
