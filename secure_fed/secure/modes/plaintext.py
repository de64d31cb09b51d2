"""Plaintext reference of the secure modes' scoring (INSECURE: sees every upload).

:class:`InsecureMahalanobisAggregator` is the ``plaintext`` mode's aggregator
with the robust pooled Mahalanobis score of :mod:`secure_fed.secure.scoring.mahalanobis`
instead of the mean squared distance, so the three modes can be compared on
the same inputs (equivalence tests, ``bench/secure_round.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from secure_fed.secure.mode import AggregateHandle, InsecurePlaintextAggregator, UploadHandle
from secure_fed.secure.scoring.mahalanobis import PlainBackend, ScoringConfig, pooled_mahalanobis

__all__ = ["InsecureMahalanobisAggregator"]


class InsecureMahalanobisAggregator(InsecurePlaintextAggregator):
    """Plaintext aggregator scoring by robust pooled Mahalanobis distance. Protects nothing."""

    def __init__(self, *, shape: tuple[int, int], bound: float,
                 scoring: ScoringConfig | None = None, **_: object) -> None:  # fmt: skip
        super().__init__(shape=shape, bound=bound)
        self.scoring = scoring or ScoringConfig()

    def score(self, handles: Mapping[str, UploadHandle], reference: AggregateHandle) -> dict[str, float]:  # noqa: E501
        """Robust pooled Mahalanobis score per upload (``reference`` is not needed)."""
        backend = PlainBackend(self._matrices(handles))
        report = pooled_mahalanobis(backend, sorted(handles), num_samples=self.shape[0],
                                    config=self.scoring)  # fmt: skip
        self.last_report = report
        return report.scores
