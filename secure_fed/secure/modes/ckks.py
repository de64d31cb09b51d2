"""``ckks`` aggregation mode: class-major CKKS uploads, encrypted pooled Mahalanobis scores.

Participant side (:class:`CkksEncoder`): clip to the public bound and encrypt
class-major under the key epoch's public context (CKKS, Cheon-Kim-Kim-Song 2017,
via TenSEAL; ``crypto.ckks``). The context is distributed once per key epoch
and cited by its SM3 fingerprint, never attached to uploads.

Server side (:class:`CkksAggregator`, holding only :class:`CkksKeys`: no secret key):

* weighted sum with public weights: plaintext-scalar multiplies and additions;
* scoring (:mod:`secure_fed.secure.scoring.mahalanobis`, one :class:`CkksScoringRound`
  per round): the equal-weight mean is an aggregate the key authority decrypts;
  the second moments are ``ct_c * ct_c'`` of every participant's first
  ciphertext run (``S = N/2`` samples), summed over the participant set,
  slot-summed by rotations and decrypted as ``C(C+1)/2`` aggregate scalars;
  each score is ``z = W (ct - p̄)`` (plaintext-scalar multiplies, no
  rotations), squared, summed over classes and slot-summed *before*
  decryption, so the key authority only ever sees one scalar per participant,
  never a per-sample vector.

Publication epoch (the default; :data:`PUBLICATION_PRESET`): each participant
also encrypts its matrix under a second key epoch, ``CKKS_PUBLICATION``, whose
flooding keeps ``s >= 40`` bits for 16,384 decrypted ciphertexts. The upload is
then a ``ckks_upload`` frame (scoring ciphertexts, publication ciphertexts); the
published weighted sum is computed on the publication ciphertexts only and the
key authority decrypts it only under that epoch, scores and second moments only
under the scoring epoch. ``DeploymentPlan(publication_preset=None)`` turns it
off (weaker: the publication is then flooded like the scores, see
``docs/audit/threat-model.md``).

The second moments are centred on the revealed mean before multiplying, so
the pooled covariance suffers no cancellation (``E[pp^T] - p̄p̄^T`` lost about
1e-4 relative precision in CKKS, enough to move scores by 1%).

:class:`CkksDeployment` generates the key epoch in a
:class:`~secure_fed.secure.parties.key_authority.KeyAuthority` (with optional
central DP on the published aggregate) and hands out the public context.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import numpy as np

from crypto.ckks import EncryptedMatrix, PublicContext, load_encrypted, pack_class_major
from crypto.errors import CryptoError
from crypto.sm import sm3_digest
from secure_fed.errors import (
    AggregationInvalid,
    DecryptionRefused,
    ModeSetupInvalid,
    ScoringInvalid,
    UploadMalformed,
)
from secure_fed.secure.ckks_claims import evaluate as evaluate_claim
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.mode import (
    AggregateHandle,
    AggregationMode,
    UploadEncoder,
    UploadHandle,
    normalized_weights,
    register_mode,
)
from secure_fed.secure.modes.ckks_upload import encode_upload, epoch_part, split_upload
from secure_fed.secure.modes.evidence import slice_fields
from secure_fed.secure.modes.planned import PlannedAggregator, adopt_counts, score_request
from secure_fed.secure.parties.key_authority import (
    KeyAuthority,
    decryption_request,
    plan_request,
)
from secure_fed.secure.publication_check import WITNESS, witness_field
from secure_fed.secure.release_plan import PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import ReleaseRequest
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import KEY_AUTHORITY_REPLY, decode_array, decode_frame

__all__ = [
    "CkksAggregator",
    "CkksDeployment",
    "CkksEncoder",
    "CkksKeys",
    "CkksMode",
    "CkksScoringRound",
    "encode_upload",
    "epoch_part",
    "split_upload",
]

_log = logging.getLogger(__name__)

#: The key epoch's preset (N = 8192, 4096 slots; one ciphertext run is the moment sample).
PRESET = "CKKS_SCORING"
#: The publication epoch's preset (N = 4096, flooded at s >= 40 for 16,384 ciphertexts).
PUBLICATION_PRESET = "CKKS_PUBLICATION"

Channel = Callable[[bytes], bytes]


def _public(public_context: object) -> PublicContext:
    if not isinstance(public_context, PublicContext):
        raise ModeSetupInvalid("public_context must be a crypto.ckks.PublicContext")
    return public_context


@dataclass(frozen=True, kw_only=True)
class CkksKeys:
    """What the ckks aggregator holds: the public context and the key-authority channel.

    Parameters
    ----------
    public_context
        The key epoch's public context (with relinearization and Galois keys).
    authority
        Bytes channel to :meth:`KeyAuthority.handle`.
    signer
        The aggregator's SM2 key; it signs every decryption request.
    plans
        Channel fixing a round's release plan with the key authority
        (:meth:`KeyAuthority.install_plan`; every plan is signed by ``signer``);
        ``None``: the authority has none.
    publication_context
        The publication epoch's public context: uploads must carry ciphertexts
        under it and the published weighted sum is computed on them. ``None``:
        the publication is computed on the scoring ciphertexts (weaker flooding).
    """

    public_context: PublicContext
    authority: Channel
    signer: ServerSigningKey
    plans: Callable[[bytes], object] | None = None
    publication_context: PublicContext | None = None

    def __post_init__(self) -> None:
        _public(self.public_context)
        if self.publication_context is not None:
            _public(self.publication_context)
        if not callable(self.authority):
            raise ModeSetupInvalid("authority must be a bytes channel (KeyAuthority.handle)")
        if not isinstance(self.signer, ServerSigningKey):
            raise ModeSetupInvalid("signer must be the aggregator's ServerSigningKey")

    def __reduce__(self) -> NoReturn:
        raise TypeError("CkksKeys cannot be pickled")


class CkksEncoder(UploadEncoder):
    """Participant side: clip and encrypt class-major (no secret key involved).

    With ``publication_context`` the matrix is encrypted under both epochs and
    framed as one ``ckks_upload`` (:func:`encode_upload`).
    """

    def __init__(
        self,
        *,
        shape: tuple[int, int],
        bound: float,
        public_context: PublicContext,
        publication_context: PublicContext | None = None,
    ) -> None:
        self.shape, self.bound, self.public = shape, bound, _public(public_context)
        self.publication = None if publication_context is None else _public(publication_context)

    def encode(self, predictions: np.ndarray) -> bytes:
        """Return the serialized ciphertexts of the clipped ``[N_pub, C]`` matrix."""
        arr = np.asarray(predictions, dtype=np.float64)
        if arr.shape != tuple(self.shape):
            raise AggregationInvalid(f"predictions shape {arr.shape} differs from {self.shape}")
        clipped = np.clip(arr, -self.bound, self.bound)
        scoring = pack_class_major(self.public, clipped).to_bytes()
        if self.publication is None:
            return scoring
        publication = pack_class_major(self.publication, clipped).to_bytes()
        return encode_upload(scoring, publication, self.public, self.publication)


class _CkksUpload(UploadHandle):
    __slots__ = ("digest", "matrix", "publication")

    def __init__(
        self, matrix: EncryptedMatrix, digest: str, publication: EncryptedMatrix | None = None
    ) -> None:
        self.matrix, self.digest, self.publication = matrix, digest, publication


class _CkksAggregate(AggregateHandle):
    __slots__ = ("claim", "ids", "matrix", "max_weight", "witness")

    def __init__(
        self,
        matrix: EncryptedMatrix,
        ids: list[str],
        max_weight: float,
        claim: dict[str, Any],
        witness: EncryptedMatrix | None = None,
    ) -> None:
        self.matrix, self.ids, self.max_weight, self.claim = matrix, ids, max_weight, claim
        #: The same claim under the scoring epoch (two epochs only): what was scored.
        self.witness = witness


def _decrypt(keys: CkksKeys, request: bytes) -> np.ndarray:
    header, payload = decode_frame(keys.authority(request), KEY_AUTHORITY_REPLY)
    return decode_array(header.get("array"), payload)


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
        claim = {"op": "weighted_sum", "uploads": _digests(handles, ids), "weights": list(w)}
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
            purpose="aggregate",
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
        decryption (:func:`~secure_fed.secure.modes.evidence.ckks_evidence`); the
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
                "op": "evidence",
                "uploads": [[pid, digests[pid]]],
                **slice_fields(piece),
                "samples": len(piece.rows),
                "step": "evidence",
                "roster": list(ask.roster or ()),
            }
            request = decryption_request(
                round_id=round_id,
                purpose="score",
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
        rows (:func:`~secure_fed.secure.modes.evidence.ckks_pair_distance`). The
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
                "op": "distance",
                "uploads": [[p, digests[p]] for p in ask.contributors],
                "samples": self.shape[0],
                "step": "copies",
                "roster": list(ask.roster or ()),
            }
            request = decryption_request(
                round_id=round_id,
                purpose="distance",
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


class CkksScoringRound:
    """One round's encrypted scoring backend (``ScoringBackend``); discard after the round.

    No mean is decrypted: every centre is the hidden mean of a participant set
    (:mod:`secure_fed.secure.modes.ckks_scoring`). Every request names
    ``round_id``, is signed and claims how its ciphertext was computed (the
    centre's uploads, the whitening, the rows, the plan step); this side runs
    the round's plan state machine (``tracker``) on every opening, like the key
    authority.
    """

    def __init__(
        self,
        *,
        keys: CkksKeys,
        shape: tuple[int, int],
        samples: int,
        uploads: Mapping[str, EncryptedMatrix],
        round_id: int,
        digests: Mapping[str, str],
        tracker: PlanTracker,
    ) -> None:
        self.keys, self.shape, self.samples = keys, shape, samples
        self.uploads, self.round_id = dict(uploads), round_id
        self.digests, self.tracker = dict(digests), tracker
        self.public = keys.public_context

    def _claim(self, op: str, ids: Sequence[str], **params: object) -> dict[str, Any]:
        return {"op": op, "uploads": [[p, self.digests[p]] for p in ids], **params}

    def _open(self, purpose: str, claim: dict[str, Any], shape: tuple[int, int]) -> np.ndarray:
        """Compute the claimed ciphertext, sign the request naming the claim, decrypt."""
        matrix = evaluate_claim(claim, self.uploads, self.public)
        request = decryption_request(
            round_id=self.round_id,
            purpose=purpose,
            participant_ids=[u[0] for u in claim["uploads"]],
            shape=shape,
            ciphertext=matrix.to_bytes(),
            signer=self.keys.signer,
            claim=claim,
            epoch=self.public.fingerprint.hex(),
        )
        return _decrypt(self.keys, request)

    def ranking_scores(self, ids: Sequence[str], samples: int) -> dict[str, float]:
        """Decrypted ``mean_{i<S} ||p_k - p̄_i||^2`` per id, ``p̄`` the hidden mean of ``ids``."""
        if samples != self.samples:
            raise ScoringInvalid(f"ckks ranking scores use the first {self.samples} samples")
        return self._scores("ranking", ids, ids, np.eye(self.shape[1]), samples)

    def final_scores(
        self, ids: Sequence[str], subset: Sequence[str], whiten: np.ndarray
    ) -> dict[str, float]:
        """Decrypted ``mean_i ||W (p_k - p̄H_i)||^2`` per id (``p̄H``: hidden mean of subset)."""
        return self._scores("final", ids, subset, whiten, self.shape[0])

    def _scores(
        self, step: str, ids: Sequence[str], centre: Sequence[str], whiten: np.ndarray, rows: int
    ) -> dict[str, float]:
        matrix = np.asarray(whiten, dtype=np.float64)
        claimed = tuple(tuple(float(x) for x in row) for row in matrix)
        out = {}
        for pid in ids:
            ask = score_request(
                round_id=self.round_id,
                step=step,
                participant=pid,
                roster=ids,
                centre=centre,
                samples=rows,
                whitening=claimed,
            )
            self.tracker.require(ask, DecryptionRefused)
            claim = self._claim(
                "score",
                [pid],
                centre=[[p, self.digests[p]] for p in centre],
                samples=rows,
                whitening=matrix.tolist(),
                step=step,
                roster=list(ids),
            )
            try:
                value = self._open("score", claim, (rows, self.shape[1]))
            except CryptoError as exc:
                raise ScoringInvalid(f"encrypted score of {pid!r} refused: {exc}") from exc
            self.tracker.record(ask, value)
            out[pid] = float(value[0])
        return out

    def moments(self, subset: Sequence[str], samples: int) -> np.ndarray:
        """Decrypted ``C x C`` second moment of ``subset`` centred on its hidden mean.

        Products are summed over the subset, then over the slots (rotations)
        *before* decryption: per-sample sums over participants are never
        revealed (with two participants they would give both vectors up to order).
        """
        if samples != self.samples:
            raise ScoringInvalid(f"ckks second moments use {self.samples} samples, not {samples}")
        c = self.shape[1]
        ask = ReleaseRequest(
            round_id=self.round_id,
            purpose="moments",
            contributors=tuple(subset),
            value_kind="aggregate",
            shape=(c, c),
            centre=tuple(subset),
            samples=samples,
        )
        self.tracker.require(ask, DecryptionRefused)
        centre = [[p, self.digests[p]] for p in subset]
        claim = self._claim("moments", subset, centre=centre, samples=samples)
        moment = self._open("moments", claim, (1, c * (c + 1) // 2)).reshape(c, c)
        self.tracker.record(ask, moment)
        return moment


class CkksDeployment(SecureDeployment):
    """A key authority holding a fresh CKKS key epoch; participants get its public context.

    Parameters
    ----------
    plan
        What it was deployed from.
    authority
        The key authority (secret key, decryption policy, optional central DP).
    public_context
        The epoch's public context, loaded by fingerprint as a participant would.
    signer
        The aggregator's SM2 key, enrolled with the key authority.
    """

    def __init__(
        self,
        *,
        plan: DeploymentPlan,
        authority: KeyAuthority,
        public_context: PublicContext,
        signer: ServerSigningKey,
    ) -> None:
        super().__init__(mode=CkksMode.name, plan=plan)
        self.authority, self.public_context = authority, public_context
        self._signer = signer
        #: The publication epoch's public context (``None``: opted out).
        self.publication_context: PublicContext | None = None

    @classmethod
    def deploy(cls, plan: DeploymentPlan) -> CkksDeployment:
        """Generate the key epoch and load its public context by SM3 fingerprint."""
        signer = plan.enrol_server("aggregator")
        authority = KeyAuthority.for_ckks(
            min_participants=plan.min_participants,
            preset=PRESET,
            publication_preset=plan.publication_preset,
            audit=plan.audit,
            central_dp=plan.central_dp,
            budget=plan.budget,
            aggregator=signer.identity,
            enrolled=frozenset(plan.participant_ids),
            upload_shape=plan.shape,
            consortium=plan.consortium_pin("key_authority"),
        )
        public = PublicContext.from_bytes(
            authority.public_context, preset=PRESET, expected_fingerprint=authority.fingerprint
        )
        dep = cls(plan=plan, authority=authority, public_context=public, signer=signer)
        if plan.publication_preset is not None:
            dep.publication_context = PublicContext.from_bytes(
                authority.publication_context,
                preset=plan.publication_preset,
                expected_fingerprint=authority.publication_fingerprint,
            )
        return dep

    @property
    def params(self) -> str:
        """The CKKS preset name."""
        return self.public_context.preset.name

    def encoder(self, participant_id: str, *, bound: float) -> CkksEncoder:
        """Build an enrolled participant's encoder (public context only)."""
        self.plan.require_enrolled(participant_id)
        return CkksEncoder(
            shape=self.shape,
            bound=bound,
            public_context=self.public_context,
            publication_context=self.publication_context,
        )

    def server_keys(self) -> CkksKeys:
        """Return the aggregator's key material: public context and authority channel."""
        return CkksKeys(
            public_context=self.public_context,
            authority=self.authority.handle,
            signer=self._signer,
            plans=self.authority.install_plan,
            publication_context=self.publication_context,
        )

    def aggregator(self, *, bound: float) -> CkksAggregator:
        """Build the aggregator (no secret key)."""
        return CkksAggregator(
            shape=self.shape,
            bound=bound,
            keys=self.server_keys(),
            scoring=self.plan.scoring,
            min_participants=self.plan.min_participants,
        )


#: The ``ckks`` mode: a key authority decrypts aggregates and single scores.
CkksMode = AggregationMode(
    name="ckks",
    insecure=False,
    central_dp=True,
    description="CKKS (TenSEAL) class-major uploads; key authority decrypts aggregates and scores",
    deploy=CkksDeployment.deploy,
)
register_mode(CkksMode)
