"""The distillation knobs of a federation, importable without torch.

The aggregator's configuration carries them to the participants; the process that
only aggregates (the deployed ServerApp) reads them without loading the learning
stack.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DistillSettings"]


@dataclass(frozen=True, kw_only=True)
class DistillSettings:
    """Distillation knobs shared by all participants of a federation.

    ``logit_adjustment`` is the ``tau`` of the logit-adjusted distillation loss
    (``secure_fed.learning.distill.distill``); 0 distills plainly.
    """

    epochs: int = 10
    lr: float = 0.1
    batch_size: int = 64
    logit_adjustment: float = 1.0
