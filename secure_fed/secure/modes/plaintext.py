"""``plaintext`` aggregation mode: the INSECURE reference (the aggregator sees every upload).

Participants send clipped float32 matrices (``SFMX`` frames); the aggregator
sums them in float64 and scores them with the same robust pooled Mahalanobis
estimate as the secure modes (:mod:`secure_fed.secure.scoring.mahalanobis`),
run directly on the matrices. The three modes therefore take the same
decisions on the same inputs (equivalence tests, ``bench/secure_round.py``);
this one protects nothing and says so in its names.

Near-duplicates use the copy threshold of the secure modes: ``max(theta x
typical, floor)`` with the typical distance of the round's scoring
(:func:`~secure_fed.secure.scoring.evidence.round_typical`), kept from the
round's :meth:`InsecurePlaintextAggregator.score`; the floor when the round
was not scored in this process or had no ranking pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

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
from secure_fed.secure.scoring.evidence import (
    copies_threshold,
    near_duplicates,
    pairwise_distances,
    plain_evidence,
    round_typical,
)
from secure_fed.secure.scoring.mahalanobis import (
    PlainBackend,
    ScoreReport,
    ScoringConfig,
    whitening,
)
from secure_fed.wire import decode_matrix, encode_matrix

if TYPE_CHECKING:
    from secure_fed.secure.release_plan import ReleasePlan

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
        self._typical: dict[int, float | None] = {}  # round -> typical pair distance of H

    def begin_round(self, plan: ReleasePlan) -> None:
        """Forget the typical distance of older rounds (nothing to fix with a gatekeeper)."""
        self._typical = {r: t for r, t in self._typical.items() if r > plan.round_id - 2}

    def score(self, handles: Mapping[str, UploadHandle], *, round_id: int) -> ScoreReport:
        """Score as every mode does; keep the round's typical pair distance for :meth:`copies`."""
        report = super().score(handles, round_id=round_id)
        typical = None
        if self.scoring.c_steps >= 1 and len(report.subset) >= 2:  # unranked: the floor
            typical = round_typical(
                covariance=report.covariance,
                subset=len(report.subset),
                scores=report.scores,
                whiten=whitening(report.covariance, ridge=self.scoring.ridge, rows=self.shape[0]),
            )
        self._typical[round_id] = typical
        return report

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
        """Near-duplicates count per upload from every pairwise distance (in the clear).

        The threshold is the secure modes' (:func:`copies_threshold` of the
        round's :func:`round_typical`); the floor if the round was not scored here.
        """
        mats = self._matrices(handles)
        cut = copies_threshold(self._typical.get(round_id))
        return near_duplicates(pairwise_distances(mats), sorted(mats), threshold=cut)

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
