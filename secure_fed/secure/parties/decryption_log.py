"""The key authority's decryption log: a record and audit events of every signed request.

:class:`SignedRequestRecord` is one row of the key authority's ``requests``: an
authenticated decryption request, granted or not, with its signed header and
signature (anyone holding the aggregator's public key can check who asked for
what) and the claim the auditor recomputes. :class:`DecryptionLog` is a base of
:class:`~secure_fed.secure.parties.decryption.DecryptionService` that appends
those rows and records the service's ``decryption.*`` audit events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from secure_fed.secure.audit import AuditSink
from secure_fed.secure.protocol.vocabulary import Party
from secure_fed.secure.publication_check import ciphertext_sm3
from secure_fed.secure.server_auth import VerifiedRequest

__all__ = ["DecryptionLog", "SignedRequestRecord"]


@dataclass(frozen=True)
class SignedRequestRecord:
    """One authenticated request in the key authority's decryption log, granted or not.

    ``signed_header`` and ``signature`` let anyone holding the aggregator's public
    key check who asked for what; ``claim`` is what the auditor recomputes.
    """

    round_id: int
    purpose: str
    request_sm3: str
    signer: str
    nonce: str
    signed_header: bytes
    signature: bytes
    claim: dict[str, object]
    ciphertext_sm3: str
    granted: bool
    reason: str | None = None


class DecryptionLog:
    """The decryption service's log and audit events (a base of the decryption service).

    The attributes are the key authority's fields this part reads and writes.
    """

    audit: AuditSink | None
    requests: list[SignedRequestRecord]

    def _journal(
        self,
        verified: VerifiedRequest,
        claim: dict[str, object],
        *,
        granted: bool,
        reason: str | None = None,
    ) -> None:
        self.requests.append(
            SignedRequestRecord(
                round_id=verified.round_id,
                purpose=verified.purpose,
                request_sm3=verified.request_sm3,
                signer=verified.signer,
                nonce=verified.nonce,
                signed_header=verified.signed_header,
                signature=verified.signature,
                claim=claim,
                ciphertext_sm3=ciphertext_sm3(verified.header),
                granted=granted,
                reason=reason,
            )
        )

    def _emit(
        self,
        event: str,
        round_id: int,
        purpose: str,
        shape: tuple[int, ...],
        ids: Sequence[str],
        *,
        dp: bool = False,
        signed: dict[str, object] | None = None,
    ) -> None:
        if self.audit is not None:
            self.audit.record(
                event,
                {
                    "party": Party.KEY_AUTHORITY,
                    "round_id": round_id,
                    "purpose": purpose,
                    "shape": list(shape),
                    "contributors": len(ids),
                    "participant_ids": list(ids),
                    "central_dp": dp,
                    **(signed or {}),
                },
            )
