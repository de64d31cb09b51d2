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
from dataclasses import dataclass
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix, Layout, PublicContext, load_encrypted, pack_class_major
from crypto.ckks import weighted_sum as ckks_weighted_sum
from crypto.ckks.aggregate import quadratic_score
from crypto.errors import CryptoError
from secure_fed.errors import AggregationInvalid, ModeSetupInvalid, ScoringInvalid, UploadMalformed
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.mode import (
    AggregateHandle,
    AggregationMode,
    SecureAggregator,
    UploadEncoder,
    UploadHandle,
    normalized_weights,
    register_mode,
)
from secure_fed.secure.parties.key_authority import KeyAuthority, decryption_request
from secure_fed.secure.scoring.mahalanobis import (
    ScoringConfig,
    class_pairs,
    symmetric_from_pairs,
)
from secure_fed.wire import KEY_AUTHORITY_REPLY, decode_array, decode_frame

__all__ = [
    "CkksAggregator",
    "CkksDeployment",
    "CkksEncoder",
    "CkksKeys",
    "CkksMode",
    "CkksScoringRound",
]

_log = logging.getLogger(__name__)

#: The key epoch's preset (N = 8192, 4096 slots; one ciphertext run is the moment sample).
PRESET = "CKKS_SCORING"

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
    """

    public_context: PublicContext
    authority: Channel

    def __post_init__(self) -> None:
        _public(self.public_context)
        if not callable(self.authority):
            raise ModeSetupInvalid("authority must be a bytes channel (KeyAuthority.handle)")


class CkksEncoder(UploadEncoder):
    """Participant side: clip and encrypt class-major (no secret key involved)."""

    def __init__(
        self, *, shape: tuple[int, int], bound: float, public_context: PublicContext
    ) -> None:
        self.shape, self.bound, self.public = shape, bound, _public(public_context)

    def encode(self, predictions: np.ndarray) -> bytes:
        """Return the serialized ciphertexts of the clipped ``[N_pub, C]`` matrix."""
        arr = np.asarray(predictions, dtype=np.float64)
        if arr.shape != tuple(self.shape):
            raise AggregationInvalid(f"predictions shape {arr.shape} differs from {self.shape}")
        return pack_class_major(self.public, np.clip(arr, -self.bound, self.bound)).to_bytes()


class _CkksUpload(UploadHandle):
    __slots__ = ("matrix",)

    def __init__(self, matrix: EncryptedMatrix) -> None:
        self.matrix = matrix


class _CkksAggregate(AggregateHandle):
    __slots__ = ("ids", "matrix", "max_weight")

    def __init__(self, matrix: EncryptedMatrix, ids: list[str], max_weight: float) -> None:
        self.matrix, self.ids, self.max_weight = matrix, ids, max_weight


def _decrypt(keys: CkksKeys, request: bytes) -> np.ndarray:
    header, payload = decode_frame(keys.authority(request), KEY_AUTHORITY_REPLY)
    return decode_array(header.get("array"), payload)


class CkksAggregator(SecureAggregator):
    """Server side of the ckks mode; decrypts only through the key authority channel.

    Parameters
    ----------
    shape, bound
        ``(N_pub, C)`` and the public clip bound.
    keys
        The public context and the key-authority channel.
    scoring
        Mahalanobis parameters (``moment_samples`` must be ``min(N, N/2 slots)``).
    """

    def __init__(
        self,
        *,
        shape: tuple[int, int],
        bound: float,
        keys: CkksKeys,
        scoring: ScoringConfig | None = None,
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

    def load(self, payload: bytes) -> UploadHandle:
        """Validate ciphertext bytes (size, header, epoch, shape, level, scale)."""
        try:
            matrix = load_encrypted(
                self.keys.public_context,
                payload,
                kind="upload",
                n_samples=self.shape[0],
                n_classes=self.shape[1],
            )
        except CryptoError as exc:
            raise UploadMalformed(f"ckks upload refused: {exc}") from exc
        return _CkksUpload(matrix)

    def _uploads(self, handles: Mapping[str, UploadHandle]) -> dict[str, EncryptedMatrix]:
        out = {}
        for pid, h in handles.items():
            if not isinstance(h, _CkksUpload):
                raise AggregationInvalid(f"handle of {pid!r} is not a ckks upload")
            out[pid] = h.matrix
        return out

    def weighted_sum(
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        """Encrypted ``sum_k w_k X_k`` (weights renormalised to sum 1, zero weights dropped)."""
        ids, w = normalized_weights(handles, weights)
        ups = self._uploads(handles)
        matrix = ckks_weighted_sum([ups[p] for p in ids], w)
        return _CkksAggregate(matrix, ids, max(w))

    def reveal(self, aggregate: AggregateHandle, *, round_id: int) -> np.ndarray:
        """Ask the key authority to decrypt the aggregate (flooded, optional central DP).

        The public clip bound and the largest weight travel with the request: they
        give the sensitivity central DP noise is calibrated to.
        """
        if not isinstance(aggregate, _CkksAggregate):
            raise AggregationInvalid("aggregate is not a ckks aggregate")
        request = decryption_request(
            round_id=round_id,
            purpose="aggregate",
            participant_ids=aggregate.ids,
            shape=self.shape,
            ciphertext=aggregate.matrix.to_bytes(),
            bound=self.bound,
            max_weight=aggregate.max_weight,
        )
        return _decrypt(self.keys, request).astype(np.float32)

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
        )


class CkksScoringRound:
    """One round's encrypted scoring backend (``ScoringBackend``); discard after the round.

    Every request it sends the key authority names ``round_id`` and is an
    aggregate over the given ids or one participant's scalar score.
    """

    def __init__(
        self,
        *,
        keys: CkksKeys,
        shape: tuple[int, int],
        samples: int,
        uploads: Mapping[str, EncryptedMatrix],
        round_id: int,
    ) -> None:
        self.keys, self.shape, self.samples = keys, shape, samples
        self.uploads, self.round_id = dict(uploads), round_id
        self.public = keys.public_context

    def _open(
        self, purpose: str, ids: Sequence[str], matrix: EncryptedMatrix, shape: tuple[int, int]
    ) -> np.ndarray:
        request = decryption_request(
            round_id=self.round_id,
            purpose=purpose,
            participant_ids=list(ids),
            shape=shape,
            ciphertext=matrix.to_bytes(),
        )
        return _decrypt(self.keys, request)

    def mean(self, ids: Sequence[str]) -> np.ndarray:
        """Decrypted equal-weight mean over ``ids`` (an aggregate)."""
        ups = [self.uploads[p] for p in ids]
        preset = self.public.preset
        if preset.weight_encoding != "scalar" or len(ups) < 2:
            matrix = ckks_weighted_sum(ups, [1.0 / len(ids)] * len(ids))
        else:  # equal weights: add first, then one scalar multiply per ciphertext
            factor = preset.rescale_factor(preset.data_primes) / len(ups)
            vectors = []
            for pos in range(ups[0].layout.count):
                acc = ups[0].vectors[pos] + ups[1].vectors[pos]
                for up in ups[2:]:
                    acc.add_(up.vectors[pos])
                vectors.append(acc * factor)
            matrix = EncryptedMatrix(
                kind="aggregate",
                preset=preset,
                fingerprint=self.public.fingerprint,
                layout=ups[0].layout,
                vectors=vectors,
                contributors=len(ups),
            )
        return self._open("mean", ids, matrix, self.shape)

    def _centered_products(self, pid: str, center: np.ndarray) -> list[Any]:
        up = self.uploads[pid]
        diffs = [
            up.vectors[up.layout.index(c, 0)] - center[: self.samples, c].tolist()
            for c in range(self.shape[1])
        ]
        return [diffs[a] * diffs[b] for a, b in class_pairs(self.shape[1])]

    def second_moment(self, ids: Sequence[str], samples: int, center: np.ndarray) -> np.ndarray:
        """Decrypted ``C x C`` centred second moment over ``ids`` and the first run of samples.

        Products ``(ct_a - c_a)(ct_b - c_b)`` are summed over the participants, then
        over the slots (rotations) *before* decryption: per-sample sums over
        participants are never revealed (with two participants they would give
        both vectors, up to order, together with the mean).
        """
        if samples != self.samples:
            raise ScoringInvalid(f"ckks second moments use {self.samples} samples, not {samples}")
        if len(ids) < 2:
            raise ScoringInvalid("second moments need at least two participants")
        sums = self._centered_products(ids[0], center)
        for pid in ids[1:]:
            for acc, prod in zip(sums, self._centered_products(pid, center), strict=True):
                acc.add_(prod)
        pairs = len(sums)
        layout = Layout(n_samples=1, n_classes=pairs, slots=self.public.preset.slots)
        matrix = EncryptedMatrix(
            kind="aggregate",
            preset=self.public.preset,
            fingerprint=self.public.fingerprint,
            layout=layout,
            vectors=[s.sum() for s in sums],
            contributors=len(ids),
        )
        flat = self._open("moments", ids, matrix, (1, pairs))[0]
        # TenSEAL labels the rescaled product with scale Delta although SEAL divided
        # by the prime q: the decrypted value is Delta/q times the true one.
        flat = flat * self.public.preset.rescale_factor(self.public.preset.data_primes)
        return symmetric_from_pairs(flat, self.shape[1])

    def scores(
        self,
        ids: Sequence[str],
        center: np.ndarray,
        whiten: np.ndarray,
        samples: int | None = None,
    ) -> dict[str, float]:
        """Encrypted ``mean_i ||W (p_i - c_i)||^2`` per id; one decrypted scalar each.

        ``samples`` is ``None`` (all ``N``) or the first ciphertext run (a view of
        the upload's first ciphertext per class, no new encryption).
        """
        if samples is not None and samples != self.samples:
            raise ScoringInvalid(f"ckks scores use all samples or the first {self.samples}")
        rows = self.shape[0] if samples is None else samples
        c = self.shape[1]
        square = np.zeros((c, c))
        square[: whiten.shape[0]] = whiten  # zero rows are skipped by quadratic_score
        out = {}
        for pid in ids:
            upload = self.uploads[pid] if samples is None else self._first_run(pid)
            try:
                enc = quadratic_score(upload, center[:rows], square)
            except CryptoError as exc:
                raise ScoringInvalid(f"encrypted score of {pid!r} refused: {exc}") from exc
            out[pid] = float(self._open("score", [pid], enc, (rows, c))[0])
        return out

    def _first_run(self, pid: str) -> EncryptedMatrix:
        up = self.uploads[pid]
        layout = Layout(n_samples=self.samples, n_classes=self.shape[1], slots=up.layout.slots)
        vectors = [up.vectors[up.layout.index(c, 0)] for c in range(self.shape[1])]
        return EncryptedMatrix(
            kind="upload",
            preset=up.preset,
            fingerprint=up.fingerprint,
            layout=layout,
            vectors=vectors,
        )


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
    """

    def __init__(
        self, *, plan: DeploymentPlan, authority: KeyAuthority, public_context: PublicContext
    ) -> None:
        super().__init__(mode=CkksMode.name, plan=plan)
        self.authority, self.public_context = authority, public_context

    @classmethod
    def deploy(cls, plan: DeploymentPlan) -> CkksDeployment:
        """Generate the key epoch and load its public context by SM3 fingerprint."""
        authority = KeyAuthority.for_ckks(
            min_participants=plan.min_participants,
            preset=PRESET,
            audit=plan.audit,
            central_dp=plan.central_dp,
            budget=plan.budget,
        )
        public = PublicContext.from_bytes(
            authority.public_context, preset=PRESET, expected_fingerprint=authority.fingerprint
        )
        return cls(plan=plan, authority=authority, public_context=public)

    @property
    def params(self) -> str:
        """The CKKS preset name."""
        return self.public_context.preset.name

    def encoder(self, participant_id: str, *, bound: float) -> CkksEncoder:
        """Build an enrolled participant's encoder (public context only)."""
        self.plan.require_enrolled(participant_id)
        return CkksEncoder(shape=self.shape, bound=bound, public_context=self.public_context)

    def server_keys(self) -> CkksKeys:
        """Return the aggregator's key material: public context and authority channel."""
        return CkksKeys(public_context=self.public_context, authority=self.authority.handle)

    def aggregator(self, *, bound: float) -> CkksAggregator:
        """Build the aggregator (no secret key)."""
        return CkksAggregator(
            shape=self.shape, bound=bound, keys=self.server_keys(), scoring=self.plan.scoring
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
