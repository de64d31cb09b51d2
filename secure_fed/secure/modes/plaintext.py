"""``plaintext`` aggregation mode: the INSECURE reference (the aggregator sees every upload).

Participants send clipped float32 matrices (``SFMX`` frames); the aggregator
sums them in float64 and scores them with the same robust pooled Mahalanobis
estimate as the secure modes (:mod:`secure_fed.secure.scoring.mahalanobis`),
run directly on the matrices. The three modes therefore take the same
decisions on the same inputs (equivalence tests, ``bench/secure_round.py``);
this one protects nothing and says so in its names.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from secure_fed.errors import AggregationInvalid
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.mode import (
    AggregateHandle,
    AggregationMode,
    SecureAggregator,
    UploadEncoder,
    UploadHandle,
    check_weights,
    register_mode,
)
from secure_fed.secure.scoring.evidence import near_duplicates, pairwise_distances, plain_evidence
from secure_fed.secure.scoring.mahalanobis import PlainBackend, ScoringConfig
from secure_fed.wire import decode_matrix, encode_matrix

__all__ = [
    "InsecurePlaintextAggregator",
    "InsecurePlaintextEncoder",
    "InsecurePlaintextMode",
    "PlaintextDeployment",
]


class _PlainUpload(UploadHandle):
    __slots__ = ("matrix",)

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix


class _PlainAggregate(AggregateHandle):
    __slots__ = ("matrix",)

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix


class InsecurePlaintextEncoder(UploadEncoder):
    """Send predictions in the clear (float32 ``SFMX`` frame). Protects nothing."""

    def __init__(self, *, shape: tuple[int, int], bound: float) -> None:
        self.shape, self.bound = shape, bound

    def encode(self, predictions: np.ndarray) -> bytes:
        """Clip to the public bound and frame as float32."""
        arr = np.asarray(predictions, dtype=np.float32)
        if arr.shape != tuple(self.shape):
            raise AggregationInvalid(f"predictions shape {arr.shape} differs from {self.shape}")
        return encode_matrix(np.clip(arr, -self.bound, self.bound))


class InsecurePlaintextAggregator(SecureAggregator):
    """Reference server: sees every upload in the clear. Protects nothing.

    Parameters
    ----------
    shape, bound
        ``(N_pub, C)`` and the public clip bound.
    scoring
        Robust pooled Mahalanobis parameters (defaults when ``None``).
    """

    def __init__(
        self, *, shape: tuple[int, int], bound: float, scoring: ScoringConfig | None = None
    ) -> None:
        self.shape, self.bound = shape, bound
        self.scoring = scoring or ScoringConfig()

    def load(self, payload: bytes) -> UploadHandle:
        """Validate shape, finiteness and the public bound."""
        return _PlainUpload(decode_matrix(payload, shape=self.shape, bound=self.bound))

    def _matrices(self, handles: Mapping[str, UploadHandle]) -> dict[str, np.ndarray]:
        out = {}
        for pid, h in handles.items():
            if not isinstance(h, _PlainUpload):
                raise AggregationInvalid(f"handle of {pid!r} is not a plaintext upload")
            out[pid] = h.matrix.astype(np.float64)
        return out

    def weighted_sum(
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        """Weighted sum in float64."""
        check_weights(handles, weights)
        mats = self._matrices(handles)
        total = sum(float(weights[pid]) * m for pid, m in mats.items())
        return _PlainAggregate(np.asarray(total, dtype=np.float64))

    def reveal(self, aggregate: AggregateHandle, *, round_id: int) -> np.ndarray:
        """Return the aggregate (nothing to decrypt: nothing was protected)."""
        if not isinstance(aggregate, _PlainAggregate):
            raise AggregationInvalid("aggregate is not a plaintext aggregate")
        return aggregate.matrix.astype(np.float32)

    def evidence(
        self, handles: Mapping[str, UploadHandle], mask: np.ndarray, *, round_id: int
    ) -> dict[str, float]:
        """Mean centred true-class logit on the labeled slice, per upload (in the clear)."""
        return plain_evidence(self._matrices(handles), mask)

    def copies(self, handles: Mapping[str, UploadHandle], *, round_id: int) -> dict[str, int]:
        """Near-duplicates count per upload from every pairwise distance (in the clear)."""
        mats = self._matrices(handles)
        return near_duplicates(pairwise_distances(mats), sorted(mats))

    def scoring_round(self, handles: Mapping[str, UploadHandle], *, round_id: int) -> PlainBackend:
        """Return the reference backend on this round's matrices (nothing to label)."""
        return PlainBackend(self._matrices(handles))


class PlaintextDeployment(SecureDeployment):
    """The plaintext mode needs no parties and no keys besides the aggregator."""

    @classmethod
    def deploy(cls, plan: DeploymentPlan) -> PlaintextDeployment:
        """Return the deployment of ``plan`` (nothing to enrol)."""
        return cls(mode=InsecurePlaintextMode.name, plan=plan)

    @property
    def params(self) -> str:
        """Uploads are float32 matrices."""
        return "float32"

    def encoder(self, participant_id: str, *, bound: float) -> InsecurePlaintextEncoder:
        """Build an enrolled participant's (clear-text) encoder."""
        self.plan.require_enrolled(participant_id)
        return InsecurePlaintextEncoder(shape=self.shape, bound=bound)

    def aggregator(self, *, bound: float) -> InsecurePlaintextAggregator:
        """Build the reference aggregator."""
        return InsecurePlaintextAggregator(shape=self.shape, bound=bound, scoring=self.plan.scoring)


#: The insecure plaintext reference mode (``--mode plaintext``).
InsecurePlaintextMode = AggregationMode(
    name="plaintext",
    insecure=True,
    central_dp=False,
    description="INSECURE reference: the aggregator sees every participant's predictions",
    deploy=PlaintextDeployment.deploy,
)
register_mode(InsecurePlaintextMode)
