"""The verifier: a second server that recomputes every CKKS claim before it is decrypted.

The key authority holds the secret key but not the uploads (holding them it could decrypt
each participant alone), so on its own it cannot tell that a request's ciphertext is the
computation its claim names; the recomputation (:mod:`secure_fed.secure.recompute`)
names a forgery only after it was released. The :class:`CkksVerifier` holds the uploads
and no secret key:

* the aggregator forwards every upload it accepted *as the participant signed it* (the
  signed envelope); the verifier checks the signature against the enrolled keys and the
  round with the same envelope verification the aggregator runs (``opener``, injected by
  the deployment: this package does not import the protocol layer), and keeps one upload
  per participant and round;
* for every decryption request the aggregator signed, the verifier checks the
  aggregator's signature, recomputes the claim with :func:`~secure_fed.secure.ckks_claims.evaluate`
  from *its own* copy of the round's uploads (a plaintext centre is accepted only with
  bytes whose SM3 is the claim's ``center_sm3``) and, only if the SM3 of its ciphertext
  equals the request's, returns an SM2-signed attestation
  (:mod:`secure_fed.secure.protocol.attestation`). A two-epoch publication is recomputed
  twice: the publication under the publication epoch, the witness under the scoring one.

The key authority, with this verifier enrolled, decrypts nothing without its attestation
for exactly that request and ciphertext (``KEY_AUTHORITY_RELEASE_UNATTESTED``).

Trust: prevention holds against a malicious aggregator while the verifier does not
collude with it. The verifier sees only ciphertexts under the key authority's keys; the
verifier and the key authority together could decrypt every upload (a collusion pair of
its own, ``docs/audit/threat-model.md``); the verifier and the aggregator together fall
back to detection afterwards.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from crypto.ckks import EncryptedMatrix, PublicContext, load_encrypted
from crypto.errors import CryptoError
from crypto.sm import sm3_digest
from privacy_ledger.audit.events import register_event
from secure_fed.errors import (
    AttestationRefused,
    ModeSetupInvalid,
    SecureFedError,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
    VerifierUploadRefused,
)
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.ckks_claims import array_sm3, check_claim, evaluate
from secure_fed.secure.modes.ckks_upload import epoch_part
from secure_fed.secure.protocol.attestation import Attested, sign_attestation
from secure_fed.secure.protocol.authority_requests import DecryptionRequest
from secure_fed.secure.protocol.vocabulary import AuditEvent, Channel, Party
from secure_fed.secure.publication_check import split_witness
from secure_fed.secure.server_auth import (
    RequestVerifier,
    ServerIdentity,
    ServerSigningKey,
    VerifiedRequest,
)
from secure_fed.wire import KEY_AUTHORITY_REQUEST

__all__ = ["VERIFIER_ATTESTED", "VERIFIER_UPLOAD_HELD", "CkksVerifier", "UploadOpener"]

_log = logging.getLogger(__name__)

VERIFIER_UPLOAD_HELD = register_event(
    "verifier.upload_held",
    "The verifier kept a forwarded upload its participant signed (one per participant and round).",
).name
VERIFIER_ATTESTED = register_event(
    "verifier.attested",
    "The verifier recomputed a decryption request's claim, found its ciphertext, and attested it.",
).name

#: ``opener(envelope, round_id) -> (participant id, mode payload)``: checks the
#: participant's signature under its enrolled key and the envelope's round, or raises a
#: :class:`~secure_fed.errors.SecureFedError`.
UploadOpener = Callable[[bytes, int], tuple[str, bytes]]


@dataclass
class CkksVerifier:
    """Holds the round's signed uploads, no secret key; attests requests it recomputes.

    Parameters
    ----------
    signer
        The verifier's SM2 key (the key authority enrols its identity).
    aggregator
        The aggregator's enrolled identity: every request must be signed by it.
    public_context
        The scoring epoch's public context.
    publication_context
        The publication epoch's public context (``None``: one epoch).
    participant_ids
        The enrolled participants (an upload from anyone else is refused).
    shape
        ``(N_pub, C)`` of every upload.
    opener
        The envelope verification (see :data:`UploadOpener`); ``None`` until the
        deployment links it, and every forwarded upload is refused meanwhile.
    audit
        Sink of the verifier's ``access.denied`` events, of ``verifier.upload_held``
        (each upload kept, first time only: participant, round, SM3) and of
        ``verifier.attested`` (each attestation it signed: round, purpose, request and
        ciphertext SM3).
    max_request_bytes
        Refuse larger requests before parsing.
    keep_rounds
        Rounds whose uploads are kept (the newest ones): an upload of a newer round
        drops the oldest, so memory stays at ``keep_rounds`` rounds of uploads. A claim
        naming a dropped round's upload is refused like any upload not held.
    """

    signer: ServerSigningKey
    aggregator: ServerIdentity
    public_context: PublicContext
    participant_ids: frozenset[str]
    shape: tuple[int, int]
    publication_context: PublicContext | None = None
    opener: UploadOpener | None = field(default=None, repr=False)
    audit: AuditSink | None = None
    max_request_bytes: int = 256 << 20
    keep_rounds: int = 2
    _uploads: dict[int, dict[str, bytes]] = field(default_factory=dict, init=False, repr=False)
    _digests: dict[int, dict[str, str]] = field(default_factory=dict, init=False, repr=False)
    _loaded: dict[tuple[int, str, bytes], EncryptedMatrix] = field(
        default_factory=dict, init=False, repr=False
    )
    _requests: RequestVerifier = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.keep_rounds, int) or self.keep_rounds < 1:
            raise ModeSetupInvalid(f"keep_rounds must be an integer >= 1, got {self.keep_rounds!r}")
        self._requests = RequestVerifier(
            KEY_AUTHORITY_REQUEST, self.aggregator, channel=Channel.DECRYPT
        )

    @property
    def identity(self) -> ServerIdentity:
        """The identity the key authority enrols."""
        return self.signer.identity

    # -- uploads ------------------------------------------------------------------

    def receive(self, envelope: bytes, round_id: int) -> str:
        """Keep one forwarded upload (the participant's signed envelope); return its sender.

        Raises
        ------
        VerifierUploadRefused
            No envelope verification linked, a signature or round the opener refuses,
            a sender not enrolled, or a second, different upload of the same sender
            in the round (the same envelope again is accepted).
        """
        try:
            if self.opener is None:
                raise VerifierUploadRefused("the verifier has no envelope verification linked")
            try:
                pid, payload = self.opener(envelope, round_id)
            except SecureFedError as exc:
                raise VerifierUploadRefused(f"forwarded upload refused: {exc}") from None
            if pid not in self.participant_ids:
                raise VerifierUploadRefused(f"participant {pid!r} is not enrolled")
            held = self._uploads.setdefault(round_id, {}).get(pid)
            if held is not None and not hmac.compare_digest(held, payload):
                raise VerifierUploadRefused(
                    f"{pid!r} already has another upload in round {round_id}"
                )
        except VerifierUploadRefused as exc:
            self._denied(round_id, "upload", None, exc)
            raise
        fresh = held is None
        self._uploads[round_id][pid] = payload
        digest = self._digests.setdefault(round_id, {})[pid] = sm3_digest(payload).hex()
        if fresh and self.audit is not None:
            fields = {"party": Party.VERIFIER, "round_id": round_id, "participant_id": pid}
            self.audit.record(VERIFIER_UPLOAD_HELD, {**fields, "upload_sm3": digest})
        for old in sorted(self._uploads)[: -self.keep_rounds]:
            self.forget(old)
        return pid

    def held(self, round_id: int) -> dict[str, str]:
        """SM3 (hex) of every upload held for ``round_id``, by participant id."""
        return dict(self._digests.get(round_id, {}))

    # -- attestation ----------------------------------------------------------------

    def attest(self, request: bytes, centres: Sequence[np.ndarray] = ()) -> bytes:
        """Recompute ``request``'s claim from the held uploads; attest it if it matches.

        Parameters
        ----------
        request
            The aggregator's signed decryption request, as it will send it.
        centres
            Plaintext centres the claim may name by ``center_sm3`` (each accepted
            only under the SM3 of its own float64 bytes).

        Raises
        ------
        AttestationRefused
            Not signed by the enrolled aggregator (or replayed), a malformed claim, an
            upload or centre the verifier does not hold, or a ciphertext that is not
            the claim recomputed (an ``access.denied`` event naming the request).
        """
        verified: VerifiedRequest | None = None
        try:
            try:
                verified = self._requests.verify(request, max_bytes=self.max_request_bytes)
            except (ServerRequestUnauthenticated, ServerRequestReplayed) as exc:
                raise AttestationRefused(f"request refused: {exc}") from None
            self._check(verified, {array_sm3(c): np.asarray(c) for c in centres})
        except (AttestationRefused, SecureFedError, CryptoError) as exc:
            refused = (
                exc
                if isinstance(exc, AttestationRefused)
                else AttestationRefused(f"the claim does not evaluate: {exc}")
            )
            round_id = verified.round_id if verified is not None else -1
            self._denied(round_id, "attest", verified, refused)
            raise refused from None
        attested = Attested(
            round_id=verified.round_id,
            purpose=verified.purpose,
            request_sm3=verified.request_sm3,
            ciphertext_sm3=sm3_digest(verified.payload).hex(),
        )
        signed = sign_attestation(self.signer, attested)
        if self.audit is not None:
            self.audit.record(
                VERIFIER_ATTESTED,
                {
                    "party": Party.VERIFIER,
                    "round_id": attested.round_id,
                    "purpose": attested.purpose,
                    "request_sm3": attested.request_sm3,
                    "ciphertext_sm3": attested.ciphertext_sm3,
                    "attestation_sm3": sm3_digest(signed).hex(),
                },
            )
        return signed

    def _check(self, verified: VerifiedRequest, centres: Mapping[str, np.ndarray]) -> None:
        asked = DecryptionRequest.from_wire(verified.header)
        ids = list(asked.participant_ids)
        claim = check_claim(asked.claim, purpose=asked.purpose, ids=ids)
        publication, witness = split_witness(verified.header, verified.payload)
        pub = self.publication_context
        named = str(asked.epoch) if asked.names_epoch else self.public_context.fingerprint.hex()
        if pub is not None and named == pub.fingerprint.hex():
            epoch = pub
        elif named == self.public_context.fingerprint.hex():
            epoch = self.public_context
        else:
            raise AttestationRefused(f"the request names no key epoch the verifier knows: {named}")
        parts = [(epoch, publication)]
        if witness is not None:
            parts.append((self.public_context, witness))
        for public, ciphertext in parts:
            uploads = self._named(verified.round_id, claim, public)
            try:
                matrix = evaluate(claim, uploads, public, centres.get)
            except KeyError:
                raise AttestationRefused(
                    "the claim names a plaintext centre the aggregator did not send"
                ) from None
            if not hmac.compare_digest(sm3_digest(matrix.to_bytes()), sm3_digest(ciphertext)):
                raise AttestationRefused(
                    "the ciphertext is not the one its claim recomputes to from the "
                    "participants' signed uploads"
                )

    def _named(
        self, round_id: int, claim: Mapping[str, object], public: PublicContext
    ) -> dict[str, EncryptedMatrix]:
        """Load every upload the claim names from this verifier's own copy of the round."""
        held, digests = self._uploads.get(round_id, {}), self._digests.get(round_id, {})
        named = list(claim["uploads"]) + list(claim.get("centre", []))  # type: ignore[call-overload]
        out: dict[str, EncryptedMatrix] = {}
        for pid, digest in named:
            payload = held.get(pid)
            if payload is None or not hmac.compare_digest(digests.get(pid, ""), str(digest)):
                raise AttestationRefused(
                    f"the claim names an upload of {pid!r} the verifier does not hold "
                    f"for round {round_id}"
                )
            key = (round_id, pid, public.fingerprint)
            if key not in self._loaded:
                self._loaded[key] = load_encrypted(
                    public,
                    epoch_part(payload, public),
                    kind="upload",
                    n_samples=self.shape[0],
                    n_classes=self.shape[1],
                )
            out[pid] = self._loaded[key]
        return out

    def forget(self, round_id: int) -> None:
        """Drop a finished round's uploads (the verifier keeps no more than it needs)."""
        self._uploads.pop(round_id, None)
        self._digests.pop(round_id, None)
        for key in [k for k in self._loaded if k[0] == round_id]:
            del self._loaded[key]

    def _denied(
        self, round_id: int, op: str, verified: VerifiedRequest | None, exc: SecureFedError
    ) -> None:
        _log.warning("verifier refused %s: %s", op, exc)
        if self.audit is not None:
            fields: dict[str, object] = {
                "party": Party.VERIFIER,
                "op": op,
                "round_id": round_id,
                "code": exc.code,
                "reason": str(exc),
            }
            if verified is not None:
                fields |= {"purpose": verified.purpose, "request_sm3": verified.request_sm3}
            self.audit.record(AuditEvent.ACCESS_DENIED, fields)
