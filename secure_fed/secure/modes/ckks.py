"""``ckks`` aggregation mode: class-major CKKS uploads, encrypted pooled Mahalanobis scores.

Participant side (:class:`CkksEncoder`): clip to the public bound and encrypt
class-major under the key epoch's public context (CKKS, Cheon-Kim-Kim-Song 2017,
via TenSEAL; ``crypto.ckks``). The context is distributed once per key epoch
and cited by its SM3 fingerprint, never attached to uploads.

Server side (:class:`CkksAggregator`), which holds no secret key:

* weighted sum with public weights: plaintext-scalar multiplies and additions;
* scoring (:mod:`secure_fed.secure.scoring.mahalanobis`): the equal-weight mean is an aggregate
  the key authority decrypts; the second moments are ``ct_c * ct_c'`` of every
  participant's first ciphertext run (``S = N/2`` samples), summed over the
  participant set, slot-summed by rotations and decrypted as ``C(C+1)/2``
  aggregate scalars; each score is ``z = W (ct - p̄)`` (plaintext-scalar
  multiplies, no rotations), squared, summed over classes and slot-summed
  *before* decryption, so the key authority only ever sees one scalar per
  participant, never a per-sample vector.

The second moments are centred on the revealed mean before multiplying, so
the pooled covariance suffers no cancellation (``E[pp^T] - p̄p̄^T`` lost about
1e-4 relative precision in CKKS, enough to move scores by 1%).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from crypto.ckks import EncryptedMatrix, Layout, PublicContext, load_encrypted, pack_class_major
from crypto.ckks import weighted_sum as ckks_weighted_sum
from crypto.ckks.aggregate import quadratic_score
from crypto.errors import CryptoError
from secure_fed.errors import AggregationInvalid, ModeSetupInvalid, ScoringInvalid, UploadMalformed
from secure_fed.secure.mode import (
    AggregateHandle,
    AggregationMode,
    SecureAggregator,
    UploadEncoder,
    UploadHandle,
    normalized_weights,
    register_mode,
)
from secure_fed.secure.parties.key_authority import RESPONSE_MAGIC, decryption_request
from secure_fed.secure.scoring.mahalanobis import (
    ScoringConfig,
    class_pairs,
    pooled_mahalanobis,
    symmetric_from_pairs,
)
from secure_fed.wire import decode_array, decode_frame

__all__ = ["CkksAggregator", "CkksEncoder", "CkksMode"]

_log = logging.getLogger(__name__)

Channel = Callable[[bytes], bytes]


def _public(public_context: PublicContext | None) -> PublicContext:
    if not isinstance(public_context, PublicContext):
        raise ModeSetupInvalid("ckks mode needs public_context (crypto.ckks.PublicContext)")
    return public_context


class CkksEncoder(UploadEncoder):
    """Participant side: clip and encrypt class-major (no secret key involved)."""

    def __init__(self, *, shape: tuple[int, int], bound: float,
                 public_context: PublicContext | None = None, **_: object) -> None:  # fmt: skip
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


class CkksAggregator(SecureAggregator):
    """Server side of the ckks mode; decrypts only through the key authority channel.

    Parameters
    ----------
    shape, bound
        ``(N_pub, C)`` and the public clip bound.
    public_context
        The key epoch's public context (with relinearization and Galois keys).
    authority
        Bytes channel to :meth:`KeyAuthority.handle`.
    scoring
        Mahalanobis parameters (``moment_samples`` must be ``min(N, N/2 slots)``).
    """

    def __init__(self, *, shape: tuple[int, int], bound: float,
                 public_context: PublicContext | None = None, authority: Channel | None = None,
                 scoring: ScoringConfig | None = None, round_id: int = 0,
                 **_: object) -> None:  # fmt: skip
        self.shape, self.bound, self.public = shape, bound, _public(public_context)
        if authority is None:
            raise ModeSetupInvalid("ckks mode needs an authority channel (KeyAuthority.handle)")
        self.authority = authority
        self.samples = min(shape[0], self.public.preset.slots)
        self.scoring = scoring or ScoringConfig(moment_samples=self.samples)
        if min(self.scoring.moment_samples, shape[0]) != self.samples:
            raise ModeSetupInvalid(f"ckks scoring uses the first {self.samples} samples "
                                   f"(one ciphertext run); moment_samples must match")
        self.round_id = round_id
        self._handles: dict[str, _CkksUpload] = {}

    # -- SecureAggregator -----------------------------------------------------------

    def load(self, payload: bytes) -> UploadHandle:
        """Validate ciphertext bytes (size, header, epoch, shape, level, scale)."""
        try:
            matrix = load_encrypted(self.public, payload, kind="upload",
                                    n_samples=self.shape[0], n_classes=self.shape[1])
        except CryptoError as exc:
            raise UploadMalformed(f"ckks upload refused: {exc}") from exc
        return _CkksUpload(matrix)

    def _uploads(self, handles: Mapping[str, UploadHandle]) -> dict[str, _CkksUpload]:
        for pid, h in handles.items():
            if not isinstance(h, _CkksUpload):
                raise AggregationInvalid(f"handle of {pid!r} is not a ckks upload")
        return dict(handles)  # type: ignore[arg-type]

    def weighted_sum(self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]) -> AggregateHandle:  # noqa: E501
        """Encrypted ``sum_k w_k X_k`` (weights renormalised to sum 1, zero weights dropped)."""
        ids, w = normalized_weights(handles, weights)
        ups = self._uploads(handles)
        matrix = ckks_weighted_sum([ups[p].matrix for p in ids], w)
        return _CkksAggregate(matrix, ids, max(w))

    def reveal(self, aggregate: AggregateHandle) -> np.ndarray:
        """Ask the key authority to decrypt the aggregate (flooded, optional central DP)."""
        if not isinstance(aggregate, _CkksAggregate):
            raise AggregationInvalid("aggregate is not a ckks aggregate")
        out = self._decrypt("aggregate", aggregate.ids, aggregate.matrix, self.shape,
                            bound=self.bound, max_weight=aggregate.max_weight)  # fmt: skip
        return out.astype(np.float32)

    def score(self, handles: Mapping[str, UploadHandle], reference: AggregateHandle) -> dict[str, float]:  # noqa: E501
        """Robust pooled Mahalanobis score per upload (``reference`` is not needed).

        The centre is the equal-weight mean of the robust subset, not the
        sample-count-weighted reference: declared sample counts are the
        participants' own claims and must not move the centre.
        """
        self._handles = self._uploads(handles)
        report = pooled_mahalanobis(self, sorted(handles), num_samples=self.shape[0],
                                    config=self.scoring)  # fmt: skip
        self.last_report = report
        return report.scores

    # -- ScoringBackend --------------------------------------------------------------

    def mean(self, ids: Sequence[str]) -> np.ndarray:
        """Decrypted equal-weight mean over ``ids`` (an aggregate)."""
        ups = [self._handles[p].matrix for p in ids]
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
            matrix = EncryptedMatrix(kind="aggregate", preset=preset,
                                     fingerprint=self.public.fingerprint, layout=ups[0].layout,
                                     vectors=vectors, contributors=len(ups))
        return self._decrypt("mean", list(ids), matrix, self.shape)

    def _pairs(self) -> list[tuple[int, int]]:
        return class_pairs(self.shape[1])

    def _centered_products(self, pid: str, center: np.ndarray) -> list[Any]:
        up = self._handles[pid].matrix
        diffs = [up.vectors[up.layout.index(c, 0)] - center[: self.samples, c].tolist()
                 for c in range(self.shape[1])]
        return [diffs[a] * diffs[b] for a, b in self._pairs()]

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
        pairs = self._pairs()
        layout = Layout(n_samples=1, n_classes=len(pairs), slots=self.public.preset.slots)
        matrix = EncryptedMatrix(kind="aggregate", preset=self.public.preset,
                                 fingerprint=self.public.fingerprint, layout=layout,
                                 vectors=[s.sum() for s in sums], contributors=len(ids))
        flat = self._decrypt("moments", list(ids), matrix, (1, len(pairs)))[0]
        # TenSEAL labels the rescaled product with scale Delta although SEAL divided
        # by the prime q: the decrypted value is Delta/q times the true one.
        flat = flat * self.public.preset.rescale_factor(self.public.preset.data_primes)
        return symmetric_from_pairs(flat, self.shape[1])

    def scores(self, ids: Sequence[str], center: np.ndarray, whiten: np.ndarray,
               samples: int | None = None) -> dict[str, float]:  # fmt: skip
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
            upload = self._handles[pid].matrix if samples is None else self._first_run(pid)
            try:
                enc = quadratic_score(upload, center[:rows], square)
            except CryptoError as exc:
                raise ScoringInvalid(f"encrypted score of {pid!r} refused: {exc}") from exc
            out[pid] = float(self._decrypt("score", [pid], enc, (rows, c))[0])
        return out

    def _first_run(self, pid: str) -> EncryptedMatrix:
        up = self._handles[pid].matrix
        layout = Layout(n_samples=self.samples, n_classes=self.shape[1], slots=up.layout.slots)
        vectors = [up.vectors[up.layout.index(c, 0)] for c in range(self.shape[1])]
        return EncryptedMatrix(kind="upload", preset=up.preset, fingerprint=up.fingerprint,
                               layout=layout, vectors=vectors)

    def _decrypt(self, purpose: str, ids: list[str], matrix: EncryptedMatrix,
                 shape: tuple[int, int], **extra: object) -> np.ndarray:  # fmt: skip
        request = decryption_request(round_id=self.round_id, purpose=purpose,
                                     participant_ids=ids, shape=shape,
                                     ciphertext=matrix.to_bytes(), **extra)  # fmt: skip
        header, payload = decode_frame(self.authority(request), RESPONSE_MAGIC,
                                       max_bytes=1 << 30)  # fmt: skip
        return decode_array(header.get("array"), payload)


#: The ``ckks`` mode; factories need ``public_context`` (and ``authority`` server-side).
CkksMode = AggregationMode(
    name="ckks",
    insecure=False,
    description="CKKS (TenSEAL) class-major uploads; key authority decrypts aggregates and scores",
    encoder=CkksEncoder,
    aggregator=CkksAggregator,
)
register_mode(CkksMode)
