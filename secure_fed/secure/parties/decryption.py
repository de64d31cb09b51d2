"""The key authority's decryption service: a request checked, decrypted, noised, logged.

:class:`DecryptionService` is the half of
:class:`~secure_fed.secure.parties.key_authority.KeyAuthority` that serves
decryption requests (:meth:`DecryptionService.handle`): the request is parsed
once (:class:`~secure_fed.secure.protocol.authority_requests.DecryptionRequest`),
its claim checked, the value's kind and contributor count read from the
ciphertext header before parsing, the release policy and the round's plan
consulted, the epoch's release limit enforced; the released value is
noise-flooded, optionally centrally noised (the publication only) and every
request is a row of ``requests``, granted or not, and audited
(:mod:`secure_fed.secure.parties.decryption_log`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from crypto.ckks import (
    EncryptedMatrix,
    KeyAuthorityKeys,
    decrypt_aggregate,
    decrypt_checked_publication,
    decrypt_score,
    load_encrypted,
)
from crypto.errors import AggregateInconsistent, CryptoError, ReleaseLimitReached
from crypto.sm import sm3_digest
from secure_fed.errors import (
    AuthorityRequestMalformed,
    KeyEpochExhausted,
    PublicationInconsistent,
    ReleaseRefused,
    ReleaseUnattested,
)
from secure_fed.secure.ckks_claims import check_claim
from secure_fed.secure.computation.ckks_scoring import moment_matrix
from secure_fed.secure.parties.central_dp import (
    CentralDP,
    ChargeGate,
    add_central_noise,
    central_sensitivity,
)
from secure_fed.secure.parties.decryption_checks import DecryptionChecks, plan_fields
from secure_fed.secure.parties.decryption_log import DecryptionLog
from secure_fed.secure.protocol.attestation import Attested, check_attestation
from secure_fed.secure.protocol.authority_requests import DecryptionRequest
from secure_fed.secure.protocol.vocabulary import (
    AuditEvent,
    AuthorityOp,
    Key,
    Party,
    Purpose,
    Step,
)
from secure_fed.secure.publication_check import ciphertext_sm3, split_witness
from secure_fed.secure.release_policy import (
    SCALAR_PURPOSES,
    ReleasePolicy,
    ReleaseRequest,
)
from secure_fed.secure.server_auth import (
    RequestVerifier,
    ServerIdentity,
    VerifiedRequest,
)
from secure_fed.secure.upload_notices import NoticeBook
from secure_fed.wire import (
    KEY_AUTHORITY_REPLY,
    encode_array,
    encode_frame,
    number_from_wire,
)

__all__ = ["DecryptionService", "plan_fields"]


class DecryptionService(DecryptionChecks, DecryptionLog):
    """Decryption for requests the enrolled aggregator signed (a base of the key authority).

    The attributes are the authority's fields this half reads and writes;
    ``_verify`` is the authority's (each refusal audited).
    """

    central_dp: CentralDP | None
    budget: ChargeGate | None
    policy: ReleasePolicy
    verifier: ServerIdentity | None
    notices: NoticeBook

    def _verify(
        self,
        request: bytes,
        verifier: RequestVerifier | None = None,
        *,
        op: str = AuthorityOp.DECRYPT,
    ) -> VerifiedRequest:
        raise NotImplementedError  # the key authority's

    def _denied(self, exc: ReleaseRefused, *, op: str) -> None:
        raise NotImplementedError  # the key authority's (an ``access.denied`` event)

    # -- decryption ---------------------------------------------------------------

    def handle(self, request: bytes, attestation: bytes | None = None) -> bytes:
        """Serve one signed decryption request (bytes in, bytes out).

        With a verifier enrolled (:attr:`verifier`), ``attestation`` must be its
        attestation of exactly this request and ciphertext
        (:mod:`secure_fed.secure.protocol.attestation`), checked after the plan's
        checks and before any decryption; without one nothing is decrypted.

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed
            Not signed by the enrolled aggregator, altered, or replayed.
        AuthorityRequestMalformed
            Bad frame, header, claim or ciphertext bytes.
        DecryptionRefused
            Not an aggregate over enough contributors nor a single scalar score,
            a centre this authority did not release, or an exhausted key epoch.
        ReleaseUnattested
            A verifier is enrolled and the request carries no valid attestation of
            it (an ``access.denied`` event naming the request; a publication is spent).

        An authenticated request refused as malformed is an ``access.denied`` event
        (op ``decrypt``) with the reason; nothing is decrypted.
        """
        verified = self._verify(request)
        try:
            return self._serve(verified, attestation)
        except AuthorityRequestMalformed as exc:
            self._denied(exc, op=AuthorityOp.DECRYPT)
            raise

    def _serve(self, verified: VerifiedRequest, attestation: bytes | None) -> bytes:
        """Serve one verified decryption request (:meth:`handle`)."""
        asked = DecryptionRequest.from_wire(verified.header)
        round_id, purpose, shape = asked.round_id, asked.purpose, asked.shape
        ids = list(asked.participant_ids)
        claim = check_claim(asked.claim, purpose=purpose, ids=ids)
        keys = self._epoch_named(asked.epoch)
        payload, witness = split_witness(verified.header, verified.payload)
        signed = _signed_fields(verified, asked)
        self._emit(AuditEvent.DECRYPTION_REQUESTED, round_id, purpose, shape, ids, signed=signed)
        try:
            ask = self._ask(payload, round_id, purpose, ids, shape)
            ask = replace(ask, **plan_fields(claim))  # type: ignore[arg-type]
            if ask.purpose in SCALAR_PURPOSES and ask.samples not in (None, shape[0]):
                self.policy.refuse(ask, f"the claim's {ask.samples} rows are not the shape's")
            self._check_epoch(ask, keys)  # an exhausted epoch releases nothing
            self.policy.check(ask)  # before parsing: the kind and count are the header's claims
            uploads = [*claim["uploads"], *claim.get("centre", ())]  # [id, sm3], checked
            self.notices.require(
                ask, [(str(u[0]), str(u[1])) for u in uploads], log=self.policy.log
            )
            step = self._release_step(ask)
            self._check_step_epoch(ask, step, keys)
            self._check_witness(ask, step, witness)
            self._check_attested(ask, step, verified, attestation)  # before any decryption
        except ReleaseRefused as exc:
            self._journal(verified, claim, granted=False, reason=str(exc))
            raise
        try:
            if witness is not None:
                values = self._decrypt_checked(payload, witness, shape, keys)
            else:
                values = self._decrypt(payload, ask.value_kind, shape, keys)
        except ReleaseLimitReached as exc:  # this request would cross the sized t
            self._journal(verified, claim, granted=False, reason=str(exc))
            self._deny(ask, str(exc), KeyEpochExhausted)
            raise AssertionError from exc  # unreachable: _deny raises
        except AggregateInconsistent as exc:  # released nothing: the publication is spent
            self._journal(verified, claim, granted=False, reason=str(exc))
            self.plans.observe(ask, None)  # the round's publication is spent, unopened
            self._deny(ask, str(exc), PublicationInconsistent)
            raise AssertionError from exc  # unreachable: _deny raises
        if step == Step.MOMENTS:  # the plan's one covariance, as the C x C second moment
            values = self._moment_matrix(values, len(ids))
        # the plan's publication is the round's only first-order release: it, and only
        # it, is noised and charged, whatever purpose label the request carries
        dp = step == Step.PUBLICATION and self.central_dp is not None
        if dp:
            values = self._central_noise(values, ids, asked.bound, round_id)
        self._journal(verified, claim, granted=True)
        self.policy.released(replace(ask, shape=tuple(values.shape)), central_dp=dp, values=values)
        if step == Step.COPIES:  # the distance stays here: only the counts leave, at the end
            values = self._copy_counts(round_id)
        meta, raw = encode_array(values)
        reply: dict[str, object] = {Key.PURPOSE: purpose, Key.ARRAY: meta, Key.CENTRAL_DP: dp}
        return encode_frame(KEY_AUTHORITY_REPLY, reply, raw)

    def _check_attested(
        self,
        ask: ReleaseRequest,
        step: str,
        verified: VerifiedRequest,
        attestation: bytes | None,
    ) -> None:
        """Refuse, before any decryption, a request the enrolled verifier did not attest.

        The round's publication is spent by the refusal (like a witness refusal: one
        attempt per round); other steps stay open, since an unattested request learns
        nothing about any value (the verifier's answer depends on ciphertexts only).
        """
        if self.verifier is None:
            return
        expected = Attested(
            round_id=verified.round_id,
            purpose=verified.purpose,
            request_sm3=verified.request_sm3,
            ciphertext_sm3=sm3_digest(verified.payload).hex(),
        )
        try:
            check_attestation(attestation, self.verifier, expected)
        except ReleaseUnattested as exc:
            if step == Step.PUBLICATION:
                self.plans.observe(ask, None)  # the round's publication is spent, unopened
            if self.audit is not None:
                self.audit.record(
                    AuditEvent.ACCESS_DENIED,
                    {
                        "party": Party.KEY_AUTHORITY,
                        "round_id": ask.round_id,
                        "purpose": ask.purpose,
                        "request_sm3": verified.request_sm3,
                        "code": exc.code,
                        "reason": str(exc),
                    },
                )
            raise ReleaseUnattested(f"round {ask.round_id}, {ask.purpose}: {exc}") from None

    def _copy_counts(self, round_id: int) -> np.ndarray:
        """Return the copies step's reply: nothing until the last pair, then the counts.

        The counts follow the copy set's sorted order; a ``decryption.released``
        event of step ``copies`` names them (the distances are never audited nor sent).
        """
        tracker = self.plans.tracker(round_id)
        assert tracker is not None and tracker.copy_set is not None
        if tracker.phase == Step.COPIES:
            return np.zeros(0)
        ids = tracker.copy_set
        counts = [tracker.copies[p] for p in ids]
        if self.audit is not None:
            self.audit.record(
                AuditEvent.DECRYPTION_RELEASED,
                {
                    "party": Party.KEY_AUTHORITY,
                    "round_id": round_id,
                    "purpose": Purpose.DISTANCE,
                    "step": Step.COPIES,
                    "contributors": len(ids),
                    "participant_ids": list(ids),
                    "shape": [len(ids)],
                    "central_dp": False,
                    "copies": dict(zip(ids, counts, strict=True)),
                    "pairs": len(tracker.distances),
                },
            )
        return np.array(counts, dtype=np.float64)

    def _moment_matrix(self, values: np.ndarray, count: int) -> np.ndarray:
        pairs = values.size
        classes = int((np.sqrt(8 * pairs + 1) - 1) // 2)
        preset = self._keys().public_context.preset
        return moment_matrix(values, preset=preset, count=count, num_classes=classes)

    def _decrypt_checked(
        self, payload: bytes, witness: bytes, shape: tuple[int, int], keys: KeyAuthorityKeys
    ) -> np.ndarray:
        """Decrypt a publication and its witness; release it only if they agree."""
        scoring = self._keys()
        publication = self._load_counted(payload, "aggregate", shape, keys)
        scored = self._load_counted(witness, "aggregate", shape, scoring)
        return decrypt_checked_publication(
            keys,
            publication,
            witness_keys=scoring,
            witness=scored,
            min_contributors=self.min_participants,
        )

    def _load_counted(
        self, payload: bytes, kind: str, shape: tuple[int, int], keys: KeyAuthorityKeys
    ) -> EncryptedMatrix:
        """Parse ``payload`` under ``keys``; refuse it if its ciphertexts would cross the limit."""
        try:
            matrix = load_encrypted(
                keys.public_context,
                payload,
                kind="score" if kind == "score" else "aggregate",
                n_samples=shape[0],
                n_classes=shape[1],
            )
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"ciphertext refused: {exc}") from exc
        limit = self.release_limit_of(keys)
        if keys.releases + len(matrix.vectors) > limit:
            raise ReleaseLimitReached(
                f"key epoch {keys.fingerprint.hex()[:16]} released {keys.releases} of "
                f"{limit} decryptions; {len(matrix.vectors)} more are asked: rotate the keys"
            )
        return matrix

    def _decrypt(
        self, payload: bytes, kind: str, shape: tuple[int, int], keys: KeyAuthorityKeys
    ) -> np.ndarray:
        """Parse and decrypt, under ``keys``, a ciphertext whose kind the policy accepted."""
        matrix = self._load_counted(payload, kind, shape, keys)
        if kind == "score":
            return np.array([decrypt_score(keys, matrix)])
        return decrypt_aggregate(keys, matrix, min_contributors=self.min_participants)

    def _central_noise(
        self, values: np.ndarray, ids: Sequence[str], claimed_bound: object, round_id: int
    ) -> np.ndarray:
        dp, gate = self.central_dp, self.budget
        tracker = self.plans.tracker(round_id)
        assert dp is not None and gate is not None and tracker is not None
        # the cap is the plan's (its weights were checked against it); the bound the
        # configured one when set, else the request's (never below the configured caps)
        bound = dp.bound if dp.bound is not None else number_from_wire(claimed_bound)
        max_weight = tracker.plan.max_weight
        sens = central_sensitivity(size=values.size, bound=bound, max_weight=max_weight)
        return add_central_noise(
            values, dp=dp, gate=gate, participant_ids=ids, sensitivity=sens, round_id=round_id
        )


def _signed_fields(verified: VerifiedRequest, asked: DecryptionRequest) -> dict[str, object]:
    """Audit fields of a signed request: enough to check the signature and recompute."""
    return {
        "request_sm3": verified.request_sm3,
        "signer": verified.signer,
        "nonce": verified.nonce,
        "signed_header": verified.signed_header.decode("utf-8"),
        "signature": verified.signature.hex(),
        "ciphertext_sm3": ciphertext_sm3(verified.header),
        **({"epoch": asked.epoch} if asked.names_epoch else {}),
    }
