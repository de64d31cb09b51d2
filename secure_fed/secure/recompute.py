"""Recompute every ciphertext the key authority decrypted, from the stored uploads.

With a single key holder a cheating aggregator cannot be *prevented* from
sending the key authority a ciphertext other than the one its request claims
(an upload times a one-hot mask, slot-summed, under the label ``score``). It is
*detected* here: each decryption request is SM2-signed by the aggregator and
names its claim (:mod:`secure_fed.secure.ckks_claims`) and the SM3 of the
ciphertext. The auditor checks the signature against the aggregator's enrolled
public key, checks that every upload the claim names is the stored one (SM3 of
the payload as stored, the ledger's upload digest), recomputes the ciphertext
with the same code the honest aggregator runs (TenSEAL is bit-exact for these
operations; an evidence claim's mask is rebuilt from the slice it lists) and
compares SM3 digests. Every discrepancy is a :class:`Finding`
naming round, purpose and request digest; the signed request is the evidence
against the aggregator.

An upload carrying two key epochs' ciphertexts (the ``ckks`` mode's publication
epoch) is recomputed from its part under the epoch being audited; the claim names
the SM3 of the whole stored upload, which covers both parts.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from crypto.ckks import EncryptedMatrix, PublicContext, load_encrypted
from crypto.errors import CryptoError
from crypto.sm import SM2PublicKey, sm3_digest
from privacy_ledger.audit import canonical
from secure_fed.errors import SecureFedError
from secure_fed.secure.ckks_claims import check_claim, evaluate
from secure_fed.secure.modes.ckks_upload import epoch_part
from secure_fed.secure.publication_check import WITNESS, ciphertext_sm3
from secure_fed.secure.server_auth import request_message
from secure_fed.wire import KEY_AUTHORITY_REQUEST

__all__ = ["Finding", "SignedRequestEvidence", "recompute_requests"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SignedRequestEvidence:
    """What the key authority logged of one request (its journal row or audit event)."""

    round_id: int
    purpose: str
    request_sm3: str
    signed_header: bytes
    signature: bytes
    ciphertext_sm3: str

    @classmethod
    def from_event(cls, fields: Mapping[str, object]) -> SignedRequestEvidence:
        """Build from a ``decryption.requested`` audit event's fields."""
        return cls(
            round_id=int(str(fields["round_id"])),
            purpose=str(fields["purpose"]),
            request_sm3=str(fields["request_sm3"]),
            signed_header=str(fields["signed_header"]).encode("utf-8"),
            signature=bytes.fromhex(str(fields["signature"])),
            ciphertext_sm3=str(fields["ciphertext_sm3"]),
        )


@dataclass(frozen=True)
class Finding:
    """One request whose ciphertext is not what its signed claim says (or cannot be checked)."""

    round_id: int
    purpose: str
    request_sm3: str
    problem: str


def recompute_requests(
    requests: Sequence[SignedRequestEvidence],
    *,
    uploads: Mapping[int, Mapping[str, bytes]],
    public: PublicContext,
    aggregator: SM2PublicKey,
    shape: tuple[int, int],
    centers: Callable[[str], np.ndarray | None] = lambda _d: None,
) -> list[Finding]:
    """Return a finding for every request that does not recompute to its signed digest.

    Parameters
    ----------
    requests
        The key authority's log of signed requests.
    uploads
        Stored upload payloads by round id and participant id.
    public
        The key epoch's public context (public; its SM3 is in ``key.generated``).
    aggregator
        The aggregator's enrolled SM2 public key.
    shape
        ``(N_pub, C)`` of every upload.
    centers
        Plaintext centres by SM3 digest, where a claim needs one.
    """
    findings = []
    for request in requests:
        problem = _check(request, uploads, public, aggregator, shape, centers)
        if problem is not None:
            _log.warning(
                "request %s of round %d: %s", request.request_sm3[:16], request.round_id, problem
            )
            findings.append(
                Finding(request.round_id, request.purpose, request.request_sm3, problem)
            )
    return findings


def _check(
    request: SignedRequestEvidence,
    uploads: Mapping[int, Mapping[str, bytes]],
    public: PublicContext,
    aggregator: SM2PublicKey,
    shape: tuple[int, int],
    centers: Callable[[str], np.ndarray | None],
) -> str | None:
    if sm3_digest(request.signed_header).hex() != request.request_sm3:
        return "the logged request digest does not match the logged header"
    try:
        aggregator.verify(
            request_message(KEY_AUTHORITY_REQUEST, request.signed_header), request.signature
        )
    except CryptoError:
        return "the aggregator's signature does not verify"
    header = canonical.decode(request.signed_header)
    try:
        claim = check_claim(
            header.get("claim"), purpose=request.purpose, ids=header.get("participant_ids", [])
        )
    except SecureFedError as exc:
        return f"the claim is malformed: {exc}"
    matrices: dict[str, EncryptedMatrix] = {}
    problem = _load_named(claim, uploads.get(request.round_id, {}), public, shape, matrices)
    if problem is not None:
        return problem
    try:
        matrix = evaluate(claim, matrices, public, centers)
    except KeyError:
        return "unverifiable: the plaintext centre the claim names is not available"
    except (CryptoError, SecureFedError) as exc:  # e.g. an evidence slice outside the shape
        return f"the claim does not evaluate on the stored uploads: {exc}"
    digest = sm3_digest(matrix.to_bytes()).hex()
    expected = ciphertext_sm3(header) if WITNESS in header else request.ciphertext_sm3
    if not hmac.compare_digest(digest, expected):
        return "the decrypted ciphertext is not the one its claim recomputes to"
    return None


def _load_named(
    claim: Mapping[str, object],
    stored: Mapping[str, bytes],
    public: PublicContext,
    shape: tuple[int, int],
    into: dict[str, EncryptedMatrix],
) -> str | None:
    """Load every upload the claim names (its operands and a hidden centre's members).

    Each named ``[id, sm3]`` must be the stored payload; an id named twice with
    two digests is a finding too.
    """
    named = list(claim["uploads"]) + list(claim.get("centre", []))  # type: ignore[call-overload]
    digests: dict[str, str] = {}
    for pid, digest in named:
        if digests.setdefault(pid, digest) != digest:
            return f"the claim names two different uploads of {pid!r}"
        payload = stored.get(pid)
        if payload is None or not hmac.compare_digest(sm3_digest(payload).hex(), digest):
            return f"upload of {pid!r} named by the claim is not the stored one"
        if pid in into:
            continue
        try:
            part = epoch_part(payload, public)  # this epoch's ciphertexts of the upload
            into[pid] = load_encrypted(
                public, part, kind="upload", n_samples=shape[0], n_classes=shape[1]
            )
        except (CryptoError, SecureFedError) as exc:
            return f"stored upload of {pid!r} does not load: {exc}"
    return None
