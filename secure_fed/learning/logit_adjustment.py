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

**Released once.** :func:`release_prior` returns a :class:`ReleasedPrior` (the
noisy counts, the noise multiplier, the ledger round label and reservation),
handing it to a ``keep`` callback *before* the charge is committed and again
after. A participant that keeps it (a deployed node's state directory) and
restarts reuses those counts, and :func:`resume_prior` finishes a commit a
crash interrupted: the prior is charged once, never released a second time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.types import ChargeGate
from privacy_ledger.errors import ReservationExpired, ReservationNotActive
from secure_fed.errors import LearningParameterInvalid

__all__ = [
    "PRIOR_ROUND_SUFFIX",
    "LogitAdjustment",
    "ReleasedPrior",
    "adjusted_cross_entropy",
    "class_counts",
    "log_prior",
    "release_prior",
    "resume_prior",
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
        noisy = self.noisy_counts(y, num_classes, generator)
        return self.tau * log_prior(noisy, min_count=self.min_count)

    def noisy_counts(
        self, y: np.ndarray, num_classes: int, generator: torch.Generator
    ) -> np.ndarray:
        """Run the Gaussian mechanism: class counts of ``y`` plus noise, ``float64 [C]``."""
        counts = torch.as_tensor(class_counts(y, num_classes), dtype=torch.float64)
        noise = torch.randn(num_classes, generator=generator, dtype=torch.float64)
        return (counts + self.prior_noise_multiplier * noise).numpy()


@dataclass(frozen=True, kw_only=True)
class ReleasedPrior:
    """A label prior released once: the noisy counts the loss applies, and their charge.

    Parameters
    ----------
    round_id
        The ledger round label of the charge (``r1-label-prior``).
    reservation_id
        The ledger reservation that charges it.
    noise_multiplier, tau, min_count
        The :class:`LogitAdjustment` it was released with.
    noisy_counts
        The released counts (one per class), before flooring.
    committed
        Whether the charge is known to be committed (``False``: kept just
        before the commit; :func:`resume_prior` finishes it).

    Raises
    ------
    LearningParameterInvalid
        A field of the wrong type or out of range (named).
    """

    round_id: str
    reservation_id: str
    noise_multiplier: float
    tau: float
    min_count: float
    noisy_counts: tuple[float, ...]
    committed: bool

    def __post_init__(self) -> None:
        if not (isinstance(self.round_id, str) and self.round_id.endswith(PRIOR_ROUND_SUFFIX)):
            raise LearningParameterInvalid(f"round_id must end in {PRIOR_ROUND_SUFFIX!r}")
        if not (isinstance(self.reservation_id, str) and self.reservation_id):
            raise LearningParameterInvalid("reservation_id must be a non-empty string")
        LogitAdjustment(
            tau=self.tau, prior_noise_multiplier=self.noise_multiplier, min_count=self.min_count
        )
        counts = self.noisy_counts
        if not (isinstance(counts, tuple) and len(counts) >= 2 and all(_finite(v) for v in counts)):
            raise LearningParameterInvalid("noisy_counts must be >= 2 finite numbers")
        if not isinstance(self.committed, bool):
            raise LearningParameterInvalid("committed must be a boolean")

    def offset(self) -> torch.Tensor:
        """``tau * log(prior)`` of the released counts: what the loss adds to the logits."""
        noisy = np.asarray(self.noisy_counts, dtype=np.float64)
        return self.tau * log_prior(noisy, min_count=self.min_count)

    def check(self, adjustment: LogitAdjustment, num_classes: int) -> None:
        """Refuse a prior released with other settings or for another number of classes.

        Raises
        ------
        LearningParameterInvalid
            The settings or the number of classes differ (named).
        """
        mine = (self.tau, self.noise_multiplier, self.min_count, len(self.noisy_counts))
        theirs = (adjustment.tau, adjustment.prior_noise_multiplier, adjustment.min_count)
        if mine != (*theirs, num_classes):
            raise LearningParameterInvalid(
                f"released prior (tau, noise multiplier, min_count, classes) {mine} differs "
                f"from the trainer's {(*theirs, num_classes)}"
            )

    def to_fields(self) -> dict[str, object]:
        """JSON-ready fields (floats exact: ``json`` writes their shortest ``repr``)."""
        fields = {k: getattr(self, k) for k in _PRIOR_FIELDS}
        fields["noisy_counts"] = list(self.noisy_counts)
        return fields

    @classmethod
    def from_fields(cls, data: object) -> ReleasedPrior:
        """Rebuild a prior from :meth:`to_fields`.

        Raises
        ------
        LearningParameterInvalid
            Not an object with exactly these fields, or a field out of range.
        """
        if not isinstance(data, dict) or set(data) != set(_PRIOR_FIELDS):
            raise LearningParameterInvalid(f"a released prior has the fields {_PRIOR_FIELDS}")
        counts = data["noisy_counts"]
        if not isinstance(counts, list):
            raise LearningParameterInvalid("noisy_counts must be a list")
        return cls(**{**data, "noisy_counts": tuple(counts)})


_PRIOR_FIELDS = (
    "round_id",
    "reservation_id",
    "noise_multiplier",
    "tau",
    "min_count",
    "noisy_counts",
    "committed",
)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def release_prior(
    adjustment: LogitAdjustment,
    *,
    gate: ChargeGate,
    event: MechanismEvent,
    participant_id: str,
    asset_id: str,
    round_id: str,
    counts: Callable[[], np.ndarray],
    keep: Callable[[ReleasedPrior], None] | None = None,
) -> ReleasedPrior:
    """Reserve, release the noisy counts, keep them, commit, keep the commit.

    Parameters
    ----------
    adjustment
        The settings released with.
    gate
        The budget the release is charged to.
    event
        ``adjustment.event(...)``: the Gaussian mechanism reserved.
    participant_id, asset_id
        Whose budget.
    round_id
        The training round (``r1``); the charge is labelled ``r1-label-prior``.
    counts
        Runs the mechanism (:meth:`LogitAdjustment.noisy_counts`), called once.
    keep
        Called with the prior before the commit and again after it (persistence).

    Returns
    -------
    ReleasedPrior
        Committed.

    Raises
    ------
    Exception
        The gate's refusals (nothing held); whatever ``keep`` or ``commit``
        raise (the reservation is aborted when ``keep`` fails before the commit).
    """
    label = round_id + PRIOR_ROUND_SUFFIX
    reservation = gate.reserve(participant_id, asset_id, event, round_id=label)
    prior = ReleasedPrior(
        round_id=label,
        reservation_id=reservation.id,
        noise_multiplier=adjustment.prior_noise_multiplier,
        tau=adjustment.tau,
        min_count=adjustment.min_count,
        noisy_counts=tuple(float(v) for v in counts()),
        committed=False,
    )
    if keep is not None:
        try:
            keep(prior)
        except BaseException:
            gate.abort(reservation.id, released_anything=False)
            raise
    return _committed(prior, gate=gate, keep=keep)


def resume_prior(
    prior: ReleasedPrior, *, gate: ChargeGate, keep: Callable[[ReleasedPrior], None] | None = None
) -> ReleasedPrior | None:
    """Finish the charge of a prior kept before its commit (a restart in between).

    Returns
    -------
    ReleasedPrior or None
        The committed prior; ``None`` when the ledger never charged it (the
        reservation expired or was aborted): nothing was trained with it, so a
        new release replaces it.

    Raises
    ------
    ReservationUnknown
        The ledger has no such reservation (the kept prior is not this ledger's).
    """
    if prior.committed:
        return prior
    try:
        return _committed(prior, gate=gate, keep=keep)
    except (ReservationExpired, ReservationNotActive):
        return None


def _committed(
    prior: ReleasedPrior, *, gate: ChargeGate, keep: Callable[[ReleasedPrior], None] | None
) -> ReleasedPrior:
    gate.commit(prior.reservation_id)
    done = replace(prior, committed=True)
    if keep is not None:
        keep(done)
    return done


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
