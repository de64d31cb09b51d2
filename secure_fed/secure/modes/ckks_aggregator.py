"""The ``ckks`` mode's aggregator: weighted sums, the round's plan, encrypted scoring.

:class:`CkksAggregator` holds only :class:`~secure_fed.secure.modes.ckks_keys.CkksKeys`
(no secret key); every value it opens is a signed, claimed decryption request
to the key authority. Importable from :mod:`secure_fed.secure.modes.ckks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix, PublicContext, load_encrypted
from crypto.errors import CryptoError
from crypto.sm import sm3_digest
from secure_fed.errors import (
    AggregationInvalid,
    DecryptionRefused,
    ModeSetupInvalid,
    UploadMalformed,
)
from secure_fed.secure.ckks_claims import evaluate as evaluate_claim
from secure_fed.secure.computation.evidence import slice_fields
from secure_fed.secure.mode import (
    AggregateHandle,
    UploadHandle,
    normalized_weights,
)
from secure_fed.secure.modes.ckks_keys import CkksKeys, _CkksAggregate, _CkksUpload, _decrypt
from secure_fed.secure.modes.ckks_round import CkksScoringRound
from secure_fed.secure.modes.ckks_upload import split_upload
from secure_fed.secure.modes.planned import PlannedAggregator, adopt_counts
from secure_fed.secure.protocol.authority_requests import decryption_request, plan_request
from secure_fed.secure.protocol.vocabulary import ClaimOp, Purpose, Step
from secure_fed.secure.publication_check import WITNESS, witness_field
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.mahalanobis import ScoringConfig

__all__ = ["CkksAggregator"]


class CkksAggregator(PlannedAggregator):
    """Server side of the ckks mode; decrypts only through the key authority channel.

    Parameters
    ----------
    shape, bound
        ``(N_pub, C)`` and the public clip bound.
    keys
        The public context and the key-authority channel.
    scoring
        Mahalanobis parameters (``moment_samples`` must be ``min(N, N/2 slots)``).
    min_participants
        The key authority's minimum (a default release plan asks for it).
    detect_copies
        Ask the engine's plans for the ``copies`` step (near-duplicate counts,
        ``K(K-1)/2`` pair distances decrypted by the key authority per round).
    """

    def __init__(
        self,
        *,
        shape: tuple[int, int],
        bound: float,
        keys: CkksKeys,
        scoring: ScoringConfig | None = None,
        min_participants: int = 2,
        detect_copies: bool = True,
    ) -> None:
        if not isinstance(keys, CkksKeys):
            raise ModeSetupInvalid("keys must be CkksKeys (public context and authority channel)")
        self.shape, self.bound, self.keys = shape, bound, keys
        self.samples = min(shape[0], keys.public_context.preset.slots)
        self.scoring = scoring or ScoringConfig(moment_samples=self.samples)
        if min(self.scoring.moment_samples, shape[0]) != self.samples:
            raise ModeSetupInvalid(
                f"ckks scoring uses the first {self.samples} samples "
                f"(one ciphertext run); moment_samples must match"
            )
        self.min_participants = min_participants
        self.detects_copies = bool(detect_copies)
        self._plans: dict[int, PlanTracker] = {}

    def begin_round(self, plan: ReleasePlan) -> None:
        """Fix ``plan`` with the key authority and run the same plan state machine here."""
        if plan.min_participants < self.min_participants:  # never below the gatekeeper's
            plan = replace(plan, min_participants=self.min_participants)
        if self.keys.plans is not None:
            fixed = self.keys.plans(plan_request(plan, signer=self.keys.signer))
            plan = ReleasePlan.from_bytes(fixed) if isinstance(fixed, bytes) else plan
        self._plans[plan.round_id] = PlanTracker(plan=plan)

    def forward_upload(self, envelope: bytes, *, round_id: int) -> None:
        """Forward an accepted upload, as its participant signed it, to the verifier.

        The envelope gate calls this after the round engine stored the upload; without
        a verifier it does nothing. The verifier's refusal propagates (the round's
        releases over that upload would be refused anyway).
        """
        if self.keys.forward is not None:
            self.keys.forward(envelope, round_id)

    def load(self, payload: bytes) -> UploadHandle:
        """Validate ciphertext bytes (size, header, epoch, shape, level, scale).

        With a publication epoch the payload is a ``ckks_upload`` frame and both
        parts are validated, each against its own epoch.
        """
        digest = sm3_digest(payload).hex() if isinstance(payload, bytes) else ""
        pub_ctx = self.keys.publication_context
        scoring, publication = (
            (payload, None)
            if pub_ctx is None
            else split_upload(payload, self.keys.public_context, pub_ctx)
        )
        matrix = self._load(self.keys.public_context, scoring, "scoring")
        pub = (
            None
            if pub_ctx is None or publication is None
            else self._load(pub_ctx, publication, "publication")
        )
        return _CkksUpload(matrix, digest, pub)

    def _load(self, public: PublicContext, data: bytes, part: str) -> EncryptedMatrix:
        try:
            return load_encrypted(
                public, data, kind="upload", n_samples=self.shape[0], n_classes=self.shape[1]
            )
        except CryptoError as exc:
            raise UploadMalformed(f"ckks upload refused ({part} epoch): {exc}") from exc

    def _uploads(
        self, handles: Mapping[str, UploadHandle], *, publication: bool = False
    ) -> dict[str, EncryptedMatrix]:
        out = {}
        for pid, h in handles.items():
            if not isinstance(h, _CkksUpload):
                raise AggregationInvalid(f"handle of {pid!r} is not a ckks upload")
            matrix = h.publication if publication else h.matrix
            if matrix is None:
                raise AggregationInvalid(f"upload of {pid!r} has no publication ciphertexts")
            out[pid] = matrix
        return out

    def _epoch(self, *, publication: bool) -> str:
        """Hex fingerprint of the epoch a request asks the key authority to decrypt under."""
        pub = self.keys.publication_context
        ctx = pub if publication and pub is not None else self.keys.public_context
        return ctx.fingerprint.hex()

    def weighted_sum(
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        """Encrypted ``sum_k w_k X_k`` (weights renormalised to sum 1, zero weights dropped).

        Computed on the publication ciphertexts when the deployment has that epoch,
        together with its witness: the same claim over the scoring ciphertexts, which
        the key authority compares with the publication before releasing it
        (:mod:`secure_fed.secure.publication_check`).
        """
        ids, w = normalized_weights(handles, weights)
        claim = {"op": ClaimOp.WEIGHTED_SUM, "uploads": _digests(handles, ids), "weights": list(w)}
        pub = self.keys.publication_context
        if pub is None:
            matrix = evaluate_claim(claim, self._uploads(handles), self.keys.public_context)
            return _CkksAggregate(matrix, ids, max(w), claim)
        matrix = evaluate_claim(claim, self._uploads(handles, publication=True), pub)
        witness = evaluate_claim(claim, self._uploads(handles), self.keys.public_context)
        return _CkksAggregate(matrix, ids, max(w), claim, witness)

    def reveal(self, aggregate: AggregateHandle, *, round_id: int) -> np.ndarray:
        """Ask the key authority to decrypt the aggregate (flooded, optional central DP).

        The public clip bound and the largest weight travel with the request: they
        give the sensitivity central DP noise is calibrated to.
        """
        if not isinstance(aggregate, _CkksAggregate):
            raise AggregationInvalid("aggregate is not a ckks aggregate")
        tracker = self._tracker(round_id, scored=False)
        ask = ReleaseRequest(
            round_id=round_id,
            purpose=Purpose.AGGREGATE,
            contributors=tuple(aggregate.ids),
            value_kind="aggregate",
            shape=self.shape,
            weights=tuple(float(w) for w in aggregate.claim["weights"]),
        )
        tracker.require(ask, DecryptionRefused)
        ciphertext = aggregate.matrix.to_bytes()
        extra: dict[str, object] = {}
        if aggregate.witness is not None:
            witness = aggregate.witness.to_bytes()
            extra[WITNESS] = witness_field(ciphertext, witness)
            ciphertext += witness
        request = decryption_request(
            round_id=round_id,
            purpose="aggregate",
            participant_ids=aggregate.ids,
            shape=self.shape,
            ciphertext=ciphertext,
            signer=self.keys.signer,
            claim=aggregate.claim,
            bound=self.bound,
            max_weight=aggregate.max_weight,
            epoch=self._epoch(publication=True),
            **extra,
        )
        values = _decrypt(self.keys, request)
        tracker.record(ask, None)
        return values.astype(np.float32)

    def evidence(
        self, handles: Mapping[str, UploadHandle], mask: np.ndarray, *, round_id: int
    ) -> dict[str, float]:
        """Decrypted evidence of correctness per upload, one scalar each, under the plan.

        Each upload's ciphertext times the plan's slice mask, slot-summed before
        decryption (:func:`~secure_fed.secure.computation.evidence.ckks_evidence`); the
        signed request claims ``op: evidence`` with the slice's rows and labels, so
        the key authority refuses another slice and the recomputation rebuilds it.

        Raises
        ------
        ScoringInvalid, DecryptionRefused
            No slice in the plan, another mask, or a release the plan refuses.
        """
        tracker, piece, asks = self.evidence_asks(
            handles, mask, round_id=round_id, refusal=DecryptionRefused
        )
        uploads = self._uploads(handles)
        digests = dict(_digests(handles, sorted(handles)))
        out = {}
        for ask in asks:
            pid = ask.contributors[0]
            claim: dict[str, Any] = {
                "op": ClaimOp.EVIDENCE,
                "uploads": [[pid, digests[pid]]],
                **slice_fields(piece),
                "samples": len(piece.rows),
                "step": Step.EVIDENCE,
                "roster": list(ask.roster or ()),
            }
            request = decryption_request(
                round_id=round_id,
                purpose=Purpose.SCORE,
                participant_ids=[pid],
                shape=(len(piece.rows), self.shape[1]),
                ciphertext=evaluate_claim(claim, uploads, self.keys.public_context).to_bytes(),
                signer=self.keys.signer,
                claim=claim,
                epoch=self._epoch(publication=False),
            )
            value = _decrypt(self.keys, request)
            tracker.record(ask, value)
            out[pid] = float(value[0])
        return out

    def copies(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> dict[str, int] | None:
        """Near-duplicate count per accepted upload; the key authority keeps every distance.

        One signed request per pair (claim ``op: distance``, purpose ``distance``):
        the hidden-centre score of one upload against the other, ``W = I``, all
        rows (:func:`~secure_fed.secure.computation.evidence.ckks_pair_distance`). The
        key authority's reply is empty until the last pair, then the counts.
        ``None`` when the round's plan has no ``copies`` step.

        Raises
        ------
        DecryptionRefused, ScoringInvalid
            A pair the plan refuses, or a reply that is not one count per upload.
        """
        found = self.distance_asks(handles, round_id=round_id, refusal=DecryptionRefused)
        if found is None:
            return None
        tracker, asks = found
        uploads = self._uploads(handles)
        digests = dict(_digests(handles, sorted(handles)))
        reply = np.zeros(0)
        for ask in asks:
            claim: dict[str, Any] = {
                "op": ClaimOp.DISTANCE,
                "uploads": [[p, digests[p]] for p in ask.contributors],
                "samples": self.shape[0],
                "step": Step.COPIES,
                "roster": list(ask.roster or ()),
            }
            request = decryption_request(
                round_id=round_id,
                purpose=Purpose.DISTANCE,
                participant_ids=list(ask.contributors),
                shape=self.shape,
                ciphertext=evaluate_claim(claim, uploads, self.keys.public_context).to_bytes(),
                signer=self.keys.signer,
                claim=claim,
                epoch=self._epoch(publication=False),
            )
            reply = _decrypt(self.keys, request)
            tracker.record(ask, None)
        return adopt_counts(tracker, reply)

    def scoring_round(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> CkksScoringRound:
        """Return a fresh encrypted scoring backend over this round's uploads."""
        return CkksScoringRound(
            keys=self.keys,
            shape=self.shape,
            samples=self.samples,
            uploads=self._uploads(handles),
            round_id=round_id,
            digests={p: h.digest for p, h in handles.items() if isinstance(h, _CkksUpload)},
            tracker=self._tracker(round_id, scored=True),
        )


def _digests(handles: Mapping[str, UploadHandle], ids: Sequence[str]) -> list[list[str]]:
    """``[id, SM3 of the upload payload]`` per id, in order (what a claim names)."""
    out = []
    for pid in ids:
        handle = handles[pid]
        if not isinstance(handle, _CkksUpload):
            raise AggregationInvalid(f"handle of {pid!r} is not a ckks upload")
        out.append([pid, handle.digest])
    return out
