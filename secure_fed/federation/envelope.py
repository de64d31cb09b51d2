"""Signed upload envelopes: SM2 over SM3 of the canonical header and the upload digest.

An envelope is an ``envelope`` frame of :mod:`secure_fed.wire` (``SFSE``)::

    header  = canonical JSON: round_id, participant_id, mode, params,
              upload_bytes, upload_sm3, upload_id, dp_plan, receipt
    payload = u16 sig_len | DER SM2 signature | upload frame (``SFUP``)

``params`` names the cryptographic parameters of the payload (``CKKS_SCORING``,
``Z2^64/f12`` or ``float32``). ``upload_id`` is the id the payload gives itself
(shares mode; null for payloads that name nobody). ``dp_plan`` is the DP-SGD
mechanism the participant ran for the round and ``receipt`` the privacy
ledger's signed receipt of its committed charge (hex;
:mod:`privacy_ledger.budget.receipts`), both null without private training.
The signature (GB/T 32918 SM2 with the standard ID, over GB/T 32905 SM3)
covers ``SM3(header bytes) || SM3(upload)``; the upload header inside carries
the nonce, the schema hash and the payload digest, so one signature binds all
of them to the sender. The header bytes are exactly those the wire module
writes, and a receiver refuses any that are not canonical, so the signed bytes
are unambiguous.

:class:`EnvelopeVerifier` checks in this order: size limit, framing,
signature under the sender's registered key (an unknown sender fails exactly
like a bad signature, so rejections do not reveal which ids exist), binding of
the header to the upload, to the payload's own ids and to the round's
parameters, then the budget receipt when the aggregator requires one; then it
hands the inner upload to the round engine, which checks round and replay,
schema, payload reuse, and the mode's crypto checks. Every rejection raises a
typed error and writes an ``upload.rejected`` audit event; a rejected upload
never touches the round.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Mapping

from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey, sm3_digest
from privacy_ledger.budget.receipts import DPPlan, ReceiptVerifier
from privacy_ledger.errors import ReceiptInvalid
from secure_fed.errors import (
    SecureFedError,
    UploadBindingInvalid,
    UploadMalformed,
    UploadReceiptInvalid,
    UploadReceiptMissing,
    UploadSignatureInvalid,
)
from secure_fed.federation.messages import decode_upload, payload_ids, training_label
from secure_fed.secure.audit import AuditSink
from secure_fed.wire import ENVELOPE, decode_frame, encode_frame, encode_header, number_from_wire

__all__ = ["EnvelopeVerifier", "plan_from_wire", "plan_to_wire", "seal_upload"]

_log = logging.getLogger(__name__)

_SIG_LEN = struct.Struct(">H")
_MAX_SIG = 80  # DER SM2 signatures are at most 72 bytes


def _signed_message(head: bytes, upload: bytes) -> bytes:
    return sm3_digest(head) + sm3_digest(upload)


def plan_to_wire(plan: DPPlan | None) -> dict[str, object] | None:
    """Return the envelope's ``dp_plan`` field (floats become exact decimals on the wire)."""
    if plan is None:
        return None
    return {
        "noise_multiplier": plan.noise_multiplier,
        "sample_rate": plan.sample_rate,
        "steps": plan.steps,
        "delta": plan.delta,
    }


def plan_from_wire(value: object) -> DPPlan:
    """Parse an envelope's ``dp_plan``; raise :class:`UploadReceiptInvalid` if unusable."""
    keys = ("noise_multiplier", "sample_rate", "delta")
    if not isinstance(value, dict) or set(value) != {*keys, "steps"}:
        raise UploadReceiptInvalid("envelope dp_plan must name exactly the receipt's plan fields")
    floats = {k: number_from_wire(value[k]) for k in keys}
    steps = value["steps"]
    if (
        any(v is None for v in floats.values())
        or isinstance(steps, bool)
        or not isinstance(steps, int)
    ):
        raise UploadReceiptInvalid("envelope dp_plan fields must be numbers")
    return DPPlan(
        noise_multiplier=float(floats["noise_multiplier"] or 0.0),
        sample_rate=float(floats["sample_rate"] or 0.0),
        steps=steps,
        delta=float(floats["delta"] or 0.0),
    )


def seal_upload(
    upload: bytes,
    *,
    key: SM2PrivateKey,
    params: str,
    plan: DPPlan | None = None,
    receipt: bytes | None = None,
) -> bytes:
    """Wrap upload bytes in a signed envelope (participant side).

    Parameters
    ----------
    upload
        ``SFUP`` bytes from :func:`secure_fed.federation.messages.encode_upload`.
    key
        The participant's SM2 signing key.
    params
        The crypto parameters of the payload (CKKS preset, ring, or ``float32``).
    plan
        The DP-SGD mechanism run for this round (None: no private training).
    receipt
        The ledger's receipt of that mechanism's committed charge.

    Raises
    ------
    UploadMalformed
        If ``upload`` is not a valid upload frame.
    """
    header, payload = decode_upload(upload, max_bytes=len(upload))
    fields: dict[str, object] = {
        "round_id": header.round_id,
        "participant_id": header.participant_id,
        "mode": header.mode,
        "params": params,
        "upload_bytes": len(upload),
        "upload_sm3": sm3_digest(upload).hex(),
        "upload_id": payload_ids(payload)[1],
        "dp_plan": plan_to_wire(plan),
        "receipt": None if receipt is None else receipt.hex(),
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
    receipts
        Verifier of the privacy ledger's budget receipts; when given, every
        upload needs a fresh receipt of its sender's committed charge for the
        round, for the DP plan its envelope declares (None: not required).
    forward
        Called with ``(envelope, round_id=...)`` after the engine stored an upload:
        the aggregator forwarding it, as signed, to the ckks mode's verifier
        (``SecureAggregator.forward_upload``; None: nothing forwarded).
    """

    def __init__(
        self,
        *,
        keys: Mapping[str, SM2PublicKey],
        submit: Callable[..., str],
        params: str,
        max_bytes: int,
        audit: AuditSink | None = None,
        receipts: ReceiptVerifier | None = None,
        forward: Callable[..., object] | None = None,
    ) -> None:
        self.keys, self.submit, self.params = dict(keys), submit, params
        self.forward = forward
        self.max_bytes, self.audit, self.receipts = max_bytes, audit, receipts
        # An unknown sender's signature is checked against this key, so both refusals
        # take the same path and say the same thing.
        self._nobody = SM2PrivateKey.generate().public_key

    def accept(self, envelope: bytes, *, round_id: int) -> str:
        """Validate and submit; return the sender id.

        Raises
        ------
        UploadMalformed, UploadParticipantUnknown, UploadSignatureInvalid
            From the envelope checks; then whatever the round engine raises.
        """
        try:
            head, upload = self._verify(envelope)
            sender = self.submit(upload, round_id=round_id)
            if self.forward is not None:
                self.forward(envelope, round_id=round_id)
            return str(sender)
        except SecureFedError as exc:
            _log.warning("upload rejected: %s", exc)
            if self.audit is not None:
                details = {"round_id": round_id, "code": exc.code, "reason": exc.message}
                self.audit.record("upload.rejected", {**details, "bytes": len(envelope)})
            raise

    def open(self, envelope: bytes, round_id: int) -> tuple[str, bytes]:
        """Check an envelope as :meth:`accept` does, submit nothing; return (sender, payload).

        The ckks mode's verifier checks every upload the aggregator forwards with this
        (its own instance, over the enrolled keys).

        Raises
        ------
        UploadMalformed, UploadSignatureInvalid, UploadBindingInvalid
            From the envelope checks, or an envelope of another round.
        """
        _head, upload = self._verify(envelope)
        inner, payload = decode_upload(upload, max_bytes=self.max_bytes)
        if inner.round_id != round_id:
            raise UploadMalformed(f"envelope of round {inner.round_id}, not {round_id}")
        return inner.participant_id, payload

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
        key = self.keys.get(pid, self._nobody) if isinstance(pid, str) else self._nobody
        signed = _signed_message(encode_header(ENVELOPE, head), upload)
        try:
            key.verify(signed, sig)
        except CryptoError:
            raise UploadSignatureInvalid(
                "envelope signature does not verify under the sender's registered key"
            ) from None
        self._check_binding(head, upload)
        self._check_receipt(head)
        return head, upload

    def _check_binding(self, head: dict[str, object], upload: bytes) -> None:
        digest = sm3_digest(upload).hex()
        if head.get("upload_bytes") != len(upload) or head.get("upload_sm3") != digest:
            raise UploadMalformed("envelope size or digest does not match the upload")
        if head.get("params") != self.params:
            raise UploadMalformed(f"envelope params {head.get('params')!r} are not {self.params!r}")
        inner, payload = decode_upload(upload, max_bytes=self.max_bytes)
        for name in ("round_id", "participant_id", "mode"):
            if head.get(name) != getattr(inner, name):
                raise UploadMalformed(f"envelope {name} differs from the upload header")
        own_pid, own_uid = payload_ids(payload)
        if own_pid is not None and own_pid != head.get("participant_id"):
            raise UploadBindingInvalid("the payload names another participant than its envelope")
        if own_uid != head.get("upload_id"):
            raise UploadBindingInvalid("the payload's upload id differs from its envelope's")

    def _check_receipt(self, head: dict[str, object]) -> None:
        if self.receipts is None:
            return
        raw = head.get("receipt")
        if raw is None:
            raise UploadReceiptMissing(
                f"participant {head.get('participant_id')!r} sent no budget receipt for round "
                f"{head.get('round_id')}: no committed reservation, no upload"
            )
        try:
            data = bytes.fromhex(raw) if isinstance(raw, str) else b""
            self.receipts.verify(
                data,
                participant_id=str(head["participant_id"]),
                round_id=training_label(int(head["round_id"])),  # type: ignore[call-overload]
                plan=plan_from_wire(head.get("dp_plan")),
            )
        except (ValueError, ReceiptInvalid) as exc:
            raise UploadReceiptInvalid(f"budget receipt refused: {exc}") from None
