"""Stage events of a federation round, for progress displays.

:class:`~secure_fed.federation.federation.Federation` accepts an optional
``on_stage`` observer and calls it with a :class:`StageEvent` when a stage of
a round starts: ``training`` (a participant's DP-SGD round), ``encrypting``
(its upload being encoded by the mode: CKKS encryption, secret sharing, or
plain bytes), ``baseline`` (its local-only twin, evaluation only),
``verifying`` (the aggregator checking its envelope), ``scoring`` (pooled
Mahalanobis scores), ``aggregating`` (the weighted sum and its release),
``distilling`` (a participant learning from the publication) and
``evaluating`` (the per-round table's accuracies).

The events carry names only, never data: the observer learns what the
process is doing, not what it computes. Without an observer nothing is
wrapped and the round runs exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from secure_fed.secure.mode import (
    AggregateHandle,
    AggregatorWrapper,
    SecureAggregator,
    UploadEncoder,
    UploadHandle,
)
from secure_fed.secure.scoring.mahalanobis import ScoreReport

__all__ = ["STAGES", "ObservedAggregator", "ObservedEncoder", "StageEvent", "StageObserver"]

#: Stage names, in the order a round runs them.
STAGES = (
    "training",
    "encrypting",
    "baseline",
    "verifying",
    "scoring",
    "aggregating",
    "distilling",
    "evaluating",
)


@dataclass(frozen=True)
class StageEvent:
    """A stage of round ``round_id`` starts (for ``participant_id`` when it is per participant)."""

    round_id: int
    stage: str
    participant_id: str | None = None


StageObserver = Callable[[StageEvent], None]


class ObservedEncoder(UploadEncoder):
    """An upload encoder that reports ``encrypting`` before delegating to ``inner``."""

    def __init__(
        self, inner: UploadEncoder, *, participant_id: str, notify: Callable[[str, str], None]
    ) -> None:
        self.inner, self.participant_id, self._notify = inner, participant_id, notify

    def encode(self, predictions: np.ndarray) -> bytes:
        """Report the stage, then encode with the wrapped encoder."""
        self._notify("encrypting", self.participant_id)
        return self.inner.encode(predictions)


class ObservedAggregator(AggregatorWrapper):
    """An aggregator that reports ``scoring`` and ``aggregating`` before delegating."""

    def __init__(self, inner: SecureAggregator, *, notify: Callable[[str, str | None], None]):
        super().__init__(inner)
        self._notify = notify

    def score(self, handles: Mapping[str, UploadHandle], *, round_id: int) -> ScoreReport:
        """Report ``scoring``, then score with the wrapped aggregator."""
        self._notify("scoring", None)
        return self.inner.score(handles, round_id=round_id)

    def weighted_sum(
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        """Report ``aggregating``, then sum with the wrapped aggregator."""
        self._notify("aggregating", None)
        return self.inner.weighted_sum(handles, weights)
