"""Logit adjustment: keep minority classes under label skew and imbalance.

A model trained by plain cross-entropy on a table with 3% positives learns the
prior along with the evidence and predicts the majority class almost always;
under label skew a participant without positives uploads confident "negative"
logits that outvote the few that saw positives. The *logit-adjusted loss* of
Menon et al. (ICLR 2021, "Long-tail learning via logit adjustment")

``loss(x, y) = cross_entropy(f(x) + tau * log(pi), y)``

trains ``f`` to estimate the *balanced* posterior, ``log p(x | y)`` up to a
constant: the prior ``pi`` is added during training only, so the raw logits the
model predicts, uploads and is evaluated on carry no class prior (the Bayes
rule for balanced error is their arg-max). Used with each participant's *own*
label prior it is the calibration of FedLC (Zhang et al., ICML 2022,
"Federated learning with label distribution skew via logits calibration"), and
the Balanced Softmax of Ren et al. (NeurIPS 2020) with ``tau = 1``: a class a
participant never saw gets ``log(pi_c)`` very negative, no gradient pushes its
logit down, and the participant's upload says "don't know" for it instead of
"certainly not".

**Privacy.** The prior comes from the participant's private labels, and a loss
that depends on all labels breaks DP-SGD's accounting (one row would move every
other row's gradient; per-example clipping bounds a row's own gradient only).
So the prior is itself released by a Gaussian mechanism, charged to the same
budget before the first DP-SGD round (:meth:`LogitAdjustment.event`): the class
counts have L2 sensitivity 1 under adding or removing one row, noise of standard
deviation ``prior_noise_multiplier`` is added to every count, and what follows
(flooring at ``min_count``, normalising, the loss) is post-processing. The
ledger composes it with the DP-SGD rounds (``docs/learning.md``, section 12).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from privacy_ledger.budget.mechanism import MechanismEvent
from secure_fed.errors import LearningParameterInvalid

__all__ = [
    "LogitAdjustment",
    "adjusted_cross_entropy",
    "class_counts",
    "log_prior",
]

#: Round-id suffix of the prior's ledger event (``r1`` -> ``r1-label-prior``).
PRIOR_ROUND_SUFFIX = "-label-prior"


@dataclass(frozen=True, kw_only=True)
class LogitAdjustment:
    """Settings of the logit-adjusted DP-SGD loss.

    Parameters
    ----------
    tau
        Strength of the adjustment (Menon et al.'s ``tau``; 1 targets the
        balanced error), >= 0.
    prior_noise_multiplier
        Standard deviation of the Gaussian noise on each class count (the
        counts' sensitivity is 1), > 0. 4 costs little: calibrated with it, a
        digits participant's DP-SGD noise multiplier rises by about 1%
        (``docs/learning.md``, section 12).
    min_count
        Floor of a noisy count before normalising (> 0): a class with no rows
        keeps a small, finite prior.

    Raises
    ------
    LearningParameterInvalid
        A parameter is out of range (the message names it).
    """

    tau: float = 1.0
    prior_noise_multiplier: float = 4.0
    min_count: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.tau, int | float) and math.isfinite(self.tau) and self.tau >= 0):
            raise LearningParameterInvalid(f"tau must be a finite number >= 0, got {self.tau!r}")
        for name in ("prior_noise_multiplier", "min_count"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise LearningParameterInvalid(f"{name} must be a finite number > 0, got {value!r}")

    def event(self, *, delta: float, versions: dict[str, str]) -> MechanismEvent:
        """Return the ledger event of releasing the noisy counts: one Gaussian mechanism.

        Parameters
        ----------
        delta
            The goal's delta.
        versions
            Library versions recorded as evidence.

        Returns
        -------
        MechanismEvent
            ``gaussian``, sample rate 1, one step, sensitivity 1.
        """
        return MechanismEvent(
            noise_multiplier=self.prior_noise_multiplier,
            sample_rate=1.0,
            steps=1,
            delta=delta,
            max_grad_norm=1.0,
            mechanism="gaussian",
            versions=versions,
        )

    def noisy_log_prior(
        self, y: np.ndarray, num_classes: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Release the noisy class counts of ``y`` and return ``tau * log(prior)``.

        Parameters
        ----------
        y
            The participant's private labels.
        num_classes
            Number of classes of the task (a participant may lack some).
        generator
            Source of the Gaussian noise (``secrets``-seeded in production).

        Returns
        -------
        torch.Tensor
            ``float32 [num_classes]``, the offset added to the logits in the loss.
        """
        counts = torch.as_tensor(class_counts(y, num_classes), dtype=torch.float64)
        noise = torch.randn(num_classes, generator=generator, dtype=torch.float64)
        noisy = counts + self.prior_noise_multiplier * noise
        return self.tau * log_prior(noisy.numpy(), min_count=self.min_count)


def class_counts(y: np.ndarray, num_classes: int) -> np.ndarray:
    """Rows per class, ``float64 [num_classes]``.

    Raises
    ------
    LearningParameterInvalid
        A label is outside ``0..num_classes-1``.
    """
    labels = np.asarray(y)
    if num_classes < 2 or (len(labels) and (labels.min() < 0 or labels.max() >= num_classes)):
        raise LearningParameterInvalid(
            f"labels must be integers in 0..{num_classes - 1} with num_classes >= 2"
        )
    return np.bincount(labels.astype(np.int64), minlength=num_classes).astype(np.float64)


def log_prior(counts: np.ndarray, *, min_count: float = 1.0) -> torch.Tensor:
    """``log`` of the class prior from (noisy) counts floored at ``min_count``.

    Parameters
    ----------
    counts
        ``[C]`` counts, possibly noisy (negative values allowed).
    min_count
        Floor applied before normalising (> 0).

    Returns
    -------
    torch.Tensor
        ``float32 [C]``, ``log(max(n_c, min_count) / sum)``; exponentials sum to 1.
    """
    if not (math.isfinite(min_count) and min_count > 0):
        raise LearningParameterInvalid(f"min_count must be a finite number > 0, got {min_count!r}")
    floored = np.maximum(np.asarray(counts, dtype=np.float64), min_count)
    return torch.as_tensor(np.log(floored / floored.sum()), dtype=torch.float32)


def adjusted_cross_entropy(
    logits: torch.Tensor, y: torch.Tensor, offset: torch.Tensor | None, *, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of ``logits + offset`` (the logit-adjusted loss; plain when ``None``).

    The offset is a constant: each example's loss still depends on that example
    alone, so DP-SGD's per-example gradients and clipping are unchanged.
    """
    adjusted = logits if offset is None else logits + offset
    return nn.functional.cross_entropy(adjusted, y, reduction=reduction)
