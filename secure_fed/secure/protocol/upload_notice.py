"""A participant's signed upload notice to a gatekeeper, sent before its upload.

Before a participant uploads to the aggregator it tells the round's opening gatekeeper
(the key authority in ``ckks`` mode, the helper in ``shares`` mode) that it is
uploading, and which upload. The notice is canonical JSON::

    {"domain": "secure-fed/upload-notice/v1", "round_id": <int>, "participant_id": <str>,
     "party": "key_authority" | "helper", "upload_sm3": <64 hex>, "signature": <hex>}

``signature`` is the participant's SM2 signature (its enrolled envelope key, the one
that signed the consortium policy) over ``domain || 0x00 || SM3(canonical fields)``:
the domain prefix keeps it from being any other message that key signs (an envelope
signs two 64-byte digests, the policy its own prefix). ``party`` names the gatekeeper,
so a notice to one is never another's.

``upload_sm3`` is the SM3 of the part of the upload the gatekeeper itself sees
(:func:`notice_digest`): for the key authority the mode payload (the ciphertext bytes
whose SM3 every decryption claim lists), for the helper its sealed share (the bytes the
aggregator forwards to it in a ``load`` request). Either is fixed by the payload the
participant encodes, so an honest participant computes it before uploading.

:func:`parse_notice` checks, in order: size (:data:`MAX_NOTICE_BYTES`), canonical JSON,
the exact field set, types, domain and party, then the signature; each refusal is a
typed error with its code, and the notice is never recorded.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

from crypto.errors import CryptoError
from crypto.sm import SM2PrivateKey, SM2PublicKey, sm3_digest
from privacy_ledger.audit import canonical
from privacy_ledger.errors import CanonicalJSONInvalid
from secure_fed.errors import SecureFedError, UploadNoticeForged, UploadNoticeMalformed
from secure_fed.wire import SHARES_UPLOAD, decode_frame

__all__ = [
    "MAX_NOTICE_BYTES",
    "NOTICE_DOMAIN",
    "NOTICE_PATH",
    "UploadNotice",
    "notice_digest",
    "parse_notice",
    "sign_notice",
]

#: Domain string of every upload notice (also the signed message's prefix).
NOTICE_DOMAIN = "secure-fed/upload-notice/v1"
_PREFIX = NOTICE_DOMAIN.encode("ascii") + b"\x00"
_FIELDS = ("domain", "round_id", "participant_id", "party", "upload_sm3")
#: The gatekeeper services' route of notices (``POST``, ``application/octet-stream``).
NOTICE_PATH = "/v1/notice"
#: Largest notice accepted (about 400 bytes in practice).
MAX_NOTICE_BYTES = 1024
_PARTIES = ("key_authority", "helper")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_MAX_SIGNATURE_HEX = 160  # DER SM2 signatures are at most 72 bytes


@dataclass(frozen=True)
class UploadNotice:
    """What a verified notice says: this participant uploads this digest in this round."""

    round_id: int
    participant_id: str
    party: str
    upload_sm3: str

    def fields(self) -> dict[str, object]:
        """Return the canonical signed fields."""
        return {
            "domain": NOTICE_DOMAIN,
            "round_id": self.round_id,
            "participant_id": self.participant_id,
            "party": self.party,
            "upload_sm3": self.upload_sm3,
        }


def _message(fields: Mapping[str, object]) -> bytes:
    return _PREFIX + sm3_digest(canonical.encode(dict(fields)))


def notice_digest(payload: bytes, *, party: str) -> str:
    """Return the hex SM3 a notice to ``party`` names for a mode ``payload``.

    The key authority: SM3 of the whole payload (what a decryption claim lists). The
    helper: SM3 of the sealed share of a ``shares_upload`` frame (what it is loaded with).

    Raises
    ------
    UploadNoticeMalformed
        An unknown party, or a helper notice for a payload that is no shares upload.
    """
    if party == "key_authority":
        return sm3_digest(payload).hex()
    if party != "helper":
        raise UploadNoticeMalformed(f"no gatekeeper {party!r} takes upload notices")
    try:
        head, body = decode_frame(payload, SHARES_UPLOAD, max_bytes=len(payload))
    except SecureFedError as exc:  # the wire module's typed refusal of the frame
        raise UploadNoticeMalformed(f"the payload is no shares upload: {exc}") from None
    parts = head.get("parts")
    if (
        not isinstance(parts, list)
        or len(parts) != 2
        or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
        or sum(parts) != len(body)
    ):
        raise UploadNoticeMalformed("the shares upload's parts do not match its body")
    return sm3_digest(body[parts[0] :]).hex()


def sign_notice(
    key: SM2PrivateKey, *, round_id: int, participant_id: str, party: str, upload_sm3: str
) -> bytes:
    """Return the participant's signed notice (canonical JSON bytes)."""
    notice = UploadNotice(round_id, participant_id, party, upload_sm3)
    fields = notice.fields()
    signature = key.sign(_message(fields))
    return canonical.encode({**fields, "signature": signature.hex()})


def parse_notice(raw: object, *, party: str, keys: Mapping[str, SM2PublicKey]) -> UploadNotice:
    """Return the notice ``raw`` if it is a well-formed notice to ``party`` signed by its sender.

    Parameters
    ----------
    raw
        The notice bytes as received.
    party
        The receiving gatekeeper (``key_authority`` or ``helper``).
    keys
        Every enrolled participant's SM2 public key.

    Raises
    ------
    UploadNoticeMalformed
        Not bytes, larger than :data:`MAX_NOTICE_BYTES`, not canonical JSON, another field
        set, a mistyped field, another domain or gatekeeper.
    UploadNoticeForged
        The signature does not verify under the named participant's key (or it has none).
    """
    if not isinstance(raw, bytes) or not raw:
        raise UploadNoticeMalformed("an upload notice is non-empty bytes")
    if len(raw) > MAX_NOTICE_BYTES:
        raise UploadNoticeMalformed(f"the notice exceeds {MAX_NOTICE_BYTES} bytes")
    try:
        data = canonical.decode(raw)
    except CanonicalJSONInvalid as exc:
        raise UploadNoticeMalformed(f"the notice is not canonical JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) != {*_FIELDS, "signature"}:
        raise UploadNoticeMalformed(f"a notice names exactly {[*_FIELDS, 'signature']}")
    round_id, pid, signature = data["round_id"], data["participant_id"], data["signature"]
    if isinstance(round_id, bool) or not isinstance(round_id, int) or round_id < 1:
        raise UploadNoticeMalformed("the notice's round_id is a positive integer")
    if not isinstance(pid, str) or not _ID.match(pid):
        raise UploadNoticeMalformed("the notice's participant_id is not a participant id")
    digest = data["upload_sm3"]
    if not isinstance(digest, str) or not _HEX64.match(digest):
        raise UploadNoticeMalformed("the notice's upload_sm3 is 64 lowercase hex characters")
    if data["domain"] != NOTICE_DOMAIN:
        raise UploadNoticeMalformed(f"the notice's domain is not {NOTICE_DOMAIN!r}")
    if data["party"] not in _PARTIES or not hmac.compare_digest(str(data["party"]), party):
        raise UploadNoticeMalformed(f"the notice is addressed to {data['party']!r}, not {party!r}")
    if not isinstance(signature, str) or len(signature) > _MAX_SIGNATURE_HEX:
        raise UploadNoticeMalformed("the notice's signature is hex of a DER SM2 signature")
    notice = UploadNotice(round_id, pid, party, digest)
    key = keys.get(pid)
    try:
        if key is None:
            raise ValueError("no enrolled key")
        key.verify(_message(notice.fields()), bytes.fromhex(signature))
    except (ValueError, CryptoError):
        raise UploadNoticeForged(
            "the notice's signature does not verify under the named participant's enrolled key"
        ) from None
    return notice
