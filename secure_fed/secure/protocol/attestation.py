"""The verifier's attestation: "this request's ciphertext is its claim, recomputed".

In the ``ckks`` mode the key authority holds the secret key but not the uploads, so it
cannot check that a request's ciphertext *is* the computation its claim names. The
verifier (:mod:`secure_fed.secure.verifier`) holds the participants' signed uploads and
no secret key; it recomputes the claim and, only if the SM3 of its ciphertext equals the
request's, signs an attestation the key authority checks before it decrypts anything.

An attestation is canonical JSON (no floats)::

    {"domain": "secure-fed/verifier-attestation/v1", "round_id": 3, "purpose": "score",
     "request_sm3": <64 hex>, "ciphertext_sm3": <64 hex>, "verifier": "verifier",
     "signature": <DER hex>}

The SM2 signature covers ``DOMAIN || SM3(canonical fields without the signature)``: the
domain keeps it from being any other message the verifier's key signs. ``request_sm3``
is the SM3 of the aggregator's signed request header (it binds the claim, the ids, the
epoch and the payload's SM3), ``ciphertext_sm3`` the SM3 of the request's whole payload
(the publication and its witness, when there is one).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from crypto.errors import CryptoError
from crypto.sm import sm3_digest
from privacy_ledger.audit import canonical
from privacy_ledger.errors import CanonicalJSONInvalid
from secure_fed.errors import ReleaseUnattested
from secure_fed.secure.server_auth import ServerIdentity, ServerSigningKey

__all__ = ["ATTESTATION_DOMAIN", "Attested", "check_attestation", "sign_attestation"]

#: Domain string of every attestation (also the signed message's prefix).
ATTESTATION_DOMAIN = "secure-fed/verifier-attestation/v1"
_PREFIX = ATTESTATION_DOMAIN.encode("ascii") + b"\x00"
_FIELDS = ("domain", "round_id", "purpose", "request_sm3", "ciphertext_sm3", "verifier")
#: Largest attestation accepted (a few hundred bytes in practice).
MAX_ATTESTATION_BYTES = 4096


@dataclass(frozen=True)
class Attested:
    """What an attestation vouches for (the request it names)."""

    round_id: int
    purpose: str
    request_sm3: str
    ciphertext_sm3: str

    def fields(self, verifier: str) -> dict[str, object]:
        """Return the canonical signed fields, naming ``verifier``."""
        return {
            "domain": ATTESTATION_DOMAIN,
            "round_id": self.round_id,
            "purpose": self.purpose,
            "request_sm3": self.request_sm3,
            "ciphertext_sm3": self.ciphertext_sm3,
            "verifier": verifier,
        }


def _message(fields: dict[str, object]) -> bytes:
    return _PREFIX + sm3_digest(canonical.encode(fields))


def sign_attestation(signer: ServerSigningKey, attested: Attested) -> bytes:
    """Return the verifier's signed attestation of ``attested`` (canonical JSON bytes)."""
    fields = attested.fields(signer.identity.name)
    signature = signer.tag(_message(fields))
    return canonical.encode({**fields, "signature": signature.hex()})


def check_attestation(raw: object, verifier: ServerIdentity, expected: Attested) -> None:
    """Raise unless ``raw`` is ``verifier``'s attestation of exactly ``expected``.

    Raises
    ------
    ReleaseUnattested
        No attestation, one that does not parse, names another verifier, round,
        purpose, request or ciphertext, or whose signature does not verify.
    """
    if not isinstance(raw, bytes) or not raw:
        raise ReleaseUnattested("the request carries no attestation from the verifier")
    if len(raw) > MAX_ATTESTATION_BYTES:
        raise ReleaseUnattested(f"the attestation exceeds {MAX_ATTESTATION_BYTES} bytes")
    try:
        data = canonical.decode(raw)
    except CanonicalJSONInvalid as exc:
        raise ReleaseUnattested(f"the attestation is not canonical JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) != {*_FIELDS, "signature"}:
        raise ReleaseUnattested(f"the attestation must name exactly {[*_FIELDS, 'signature']}")
    signature = data.pop("signature")
    want = expected.fields(verifier.name)
    for name in _FIELDS:
        same = data[name] == want[name] and type(data[name]) is type(want[name])
        if isinstance(want[name], str) and isinstance(data[name], str):
            same = hmac.compare_digest(data[name], str(want[name]))
        if not same:
            raise ReleaseUnattested(
                f"the attestation's {name} is {data[name]!r}, the request's {want[name]!r}"
            )
    try:
        verifier.public_key.verify(_message(want), bytes.fromhex(str(signature)))
    except (ValueError, CryptoError):
        raise ReleaseUnattested("the attestation's signature is not the verifier's") from None
