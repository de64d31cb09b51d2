"""Federated distillation on the public set: predictions, soft labels, KL training.

Participants exchange predictions on the public set ``D_pub`` instead of
parameters (FedMD, Li and Wang 2019; FedDF, Lin et al. 2020), and distill from
the aggregate with the temperature-scaled KL loss of Hinton, Vinyals and Dean
(2015), multiplied by ``T**2`` so gradient magnitudes do not depend on ``T``.
Schedules: a cosine-annealed temperature (high early, when the soft labels
should carry the most inter-class information, decaying to 1) and a
distillation weight decaying like ``1/sqrt(t)``, so late rounds lean on the
participant's own data (``docs/learning.md``, section 7).

Prediction representation: per-sample *centered logits* ``z - mean(z)`` (the
centered log-ratio transform of the softmax probabilities, Aitchison 1982),
bounded in L-infinity by :data:`PUBLIC_LOGIT_BOUND`. A row whose largest
entry exceeds the bound is scaled down as a whole (norm clipping, as DP-SGD
clips gradients), which keeps it centered and keeps its class ranking.
``docs/learning.md`` explains the choice over probabilities and log-probabilities.

Distillation trains on public data and public soft labels only; it is not
charged to any privacy budget.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator

import numpy as np
import torch
from opacus.grad_sample import AbstractGradSampleModule, GradSampleModule
from torch import nn

from secure_fed.errors import LearningParameterInvalid
from secure_fed.learning.private_training import check_positive, predict_logits
from secure_fed.learning.public_logits import PUBLIC_LOGIT_BOUND

__all__ = [
    "PUBLIC_LOGIT_BOUND",
    "distill",
    "distill_weight",
    "kl_to_targets",
    "target_log_prior",
    "predict_public",
    "soft_labels_from_aggregate",
    "temperature_schedule",
]

logger = logging.getLogger(__name__)


def predict_public(model: nn.Module, public_x: np.ndarray) -> np.ndarray:
    """Bounded, centered logits of ``model`` on the public set.

    Parameters
    ----------
    model
        A classifier returning logits (evaluated in eval mode, mode restored).
    public_x
        ``[N_pub, *input_shape]`` public inputs.

    Returns
    -------
    numpy.ndarray
        ``float32 [N_pub, C]``; each row sums to 0 (up to rounding) and has
        every entry in ``[-PUBLIC_LOGIT_BOUND, PUBLIC_LOGIT_BOUND]``.

    Raises
    ------
    LearningParameterInvalid
        ``public_x`` is empty, or the model produced non-finite logits.
    """
    if len(public_x) == 0:
        raise LearningParameterInvalid("public_x must hold at least one row")
    logits = predict_logits(_plain(model), public_x).astype(np.float64)
    if logits.ndim != 2 or not np.isfinite(logits).all():
        raise LearningParameterInvalid("model produced non-finite or non-2-d logits on public_x")
    centered = logits - logits.mean(axis=1, keepdims=True)
    peak = np.abs(centered).max(axis=1, keepdims=True)
    scale = np.minimum(1.0, PUBLIC_LOGIT_BOUND / np.maximum(peak, 1e-12))
    bounded = np.clip(centered * scale, -PUBLIC_LOGIT_BOUND, PUBLIC_LOGIT_BOUND)
    out: np.ndarray = bounded.astype(np.float32)
    return out


def soft_labels_from_aggregate(avg_logits: np.ndarray, *, temperature: float) -> np.ndarray:
    """Soft labels ``softmax(avg_logits / T)`` from the aggregated predictions.

    Parameters
    ----------
    avg_logits
        ``[N_pub, C]`` weighted average of the participants' centered logits.
    temperature
        ``T > 0``.

    Returns
    -------
    numpy.ndarray
        ``float32 [N_pub, C]`` rows summing to 1.
    """
    check_positive(temperature=temperature)
    z = np.asarray(avg_logits, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] < 2 or not np.isfinite(z).all():
        raise LearningParameterInvalid(
            f"avg_logits must be a finite [N_pub, C>=2] array, got shape {z.shape}"
        )
    z = z / temperature
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    soft: np.ndarray = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    return soft


def temperature_schedule(
    round_index: int, total_rounds: int, *, t_max: float = 4.0, t_min: float = 1.0
) -> float:
    """Cosine-annealed distillation temperature.

    ``T_r = t_min + (t_max - t_min) * (1 + cos(pi * r / (R - 1))) / 2`` for
    0-based round ``r`` of ``R``: ``t_max`` in the first round, ``t_min`` in the
    last (a single round uses ``t_max``).

    Parameters
    ----------
    round_index
        0-based round, ``0 <= round_index < total_rounds``.
    total_rounds
        ``R >= 1``.
    t_max, t_min
        Temperatures, ``t_max >= t_min > 0``.

    Returns
    -------
    float
        The temperature of this round.
    """
    if total_rounds < 1 or not 0 <= round_index < total_rounds:
        raise LearningParameterInvalid(
            f"need 0 <= round_index < total_rounds, got {round_index!r} and {total_rounds!r}"
        )
    check_positive(t_min=t_min, t_max=t_max)
    if t_max < t_min:
        raise LearningParameterInvalid(f"t_max must be >= t_min, got {t_max} < {t_min}")
    if total_rounds == 1:
        return float(t_max)
    progress = round_index / (total_rounds - 1)
    return float(t_min + (t_max - t_min) * (1 + math.cos(math.pi * progress)) / 2)


def distill_weight(round_index: int, *, lambda0: float = 1.0) -> float:
    """Distillation weight ``lambda0 / sqrt(t)`` with ``t = round_index + 1``.

    Parameters
    ----------
    round_index
        0-based round (>= 0), so the first round has ``t = 1`` and weight ``lambda0``.
    lambda0
        Initial weight (>= 0).

    Returns
    -------
    float
        The weight of this round.
    """
    if round_index < 0:
        raise LearningParameterInvalid(f"round_index must be >= 0, got {round_index!r}")
    if not (math.isfinite(lambda0) and lambda0 >= 0):
        raise LearningParameterInvalid(f"lambda0 must be finite and >= 0, got {lambda0!r}")
    return float(lambda0 / math.sqrt(round_index + 1))


def _plain(model: nn.Module) -> nn.Module:
    """Return the plain module under an Opacus wrapper (distillation is not private)."""
    if isinstance(model, AbstractGradSampleModule):
        inner: nn.Module = model._module
        return inner
    return model


@contextlib.contextmanager
def _public_training(model: nn.Module) -> Iterator[nn.Module]:
    """Yield the plain module with any Opacus per-sample hooks switched off.

    Training on public data needs no per-sample gradients; the wrapper's hooks
    would otherwise still fire on the inner layers. They are restored after.
    """
    wrapper = model if isinstance(model, GradSampleModule) else None
    hooked = wrapper is not None and bool(wrapper.hooks_enabled)
    if wrapper is not None and hooked:
        wrapper.disable_hooks()
    try:
        yield _plain(model)
    finally:
        if wrapper is not None and hooked:
            wrapper.enable_hooks()
        for p in _plain(model).parameters():
            for attribute in ("grad_sample", "activations"):
                if hasattr(p, attribute):
                    delattr(p, attribute)


def _check_classes(student: nn.Module, public_x: np.ndarray, targets: torch.Tensor) -> None:
    classes = predict_logits(student, public_x[:1]).shape[-1]
    if classes != targets.shape[1]:
        raise LearningParameterInvalid(
            f"the model predicts {classes} classes but soft_targets have {targets.shape[1]}"
        )


def _check_targets(public_x: np.ndarray, soft_targets: np.ndarray) -> torch.Tensor:
    t = np.asarray(soft_targets, dtype=np.float64)
    if t.ndim != 2 or len(t) != len(public_x) or len(t) == 0:
        raise LearningParameterInvalid(
            f"soft_targets must be [N_pub, C] with N_pub = {len(public_x)}, got shape {t.shape}"
        )
    if not np.isfinite(t).all() or (t < 0).any() or not np.allclose(t.sum(axis=1), 1, atol=1e-3):
        raise LearningParameterInvalid("soft_targets rows must be probability vectors")
    return torch.as_tensor(t, dtype=torch.float32)


def target_log_prior(soft_targets: np.ndarray, *, temperature: float) -> torch.Tensor:
    """Log class mass of the teacher behind soft labels made at ``temperature``.

    Soft labels ``softmax(z / T)`` raised to the power ``T`` and renormalised are
    ``softmax(z)``, the teacher's own probabilities; their mean over the public set
    is the prior the teacher predicts (a public quantity: it is computed from the
    published aggregate only).

    Parameters
    ----------
    soft_targets
        ``[N_pub, C]`` probability rows.
    temperature
        The ``T`` they were made with.

    Returns
    -------
    torch.Tensor
        ``float32 [C]``, log of the mean teacher probability of each class.
    """
    check_positive(temperature=temperature)
    t = np.asarray(soft_targets, dtype=np.float64)
    logs = temperature * np.log(np.maximum(t, 1e-300))
    logs -= logs.max(axis=1, keepdims=True)
    probs = np.exp(logs) / np.exp(logs).sum(axis=1, keepdims=True)
    mass = np.maximum(probs.mean(axis=0), 1e-6)
    return torch.as_tensor(np.log(mass / mass.sum()), dtype=torch.float32)


def _kl_loss(
    student_logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    offset: torch.Tensor | None = None,
) -> torch.Tensor:
    if offset is not None:
        student_logits = student_logits + offset
    log_q = nn.functional.log_softmax(student_logits / temperature, dim=1)
    kl = nn.functional.kl_div(log_q, targets, reduction="batchmean")
    return kl * temperature**2


def kl_to_targets(
    model: nn.Module, public_x: np.ndarray, soft_targets: np.ndarray, *, temperature: float
) -> float:
    """``T**2 * KL(soft_targets || softmax(model(x) / T))`` averaged over the public set."""
    check_positive(temperature=temperature)
    targets = _check_targets(public_x, soft_targets)
    _check_classes(_plain(model), public_x, targets)
    logits = torch.as_tensor(predict_logits(_plain(model), public_x))
    return float(_kl_loss(logits, targets, temperature))


def _kl_epochs(
    student: nn.Module,
    public_x: np.ndarray,
    targets: torch.Tensor,
    temperature: float,
    weight: float,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    offset: torch.Tensor | None,
) -> None:
    xt = torch.as_tensor(np.ascontiguousarray(public_x, dtype=np.float32))
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(student.parameters(), lr=lr, momentum=0.9)
    student.train()
    for _ in range(epochs):
        order = torch.randperm(len(xt), generator=generator)
        for start in range(0, len(xt), batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = weight * _kl_loss(student(xt[idx]), targets[idx], temperature, offset)
            torch.autograd.backward(loss)
            optimizer.step()
    student.zero_grad(set_to_none=True)


def distill(
    model: nn.Module,
    public_x: np.ndarray,
    soft_targets: np.ndarray,
    *,
    temperature: float,
    weight: float,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    logit_adjustment: float = 0.0,
) -> float:
    """Train ``model`` towards the soft labels on the public set.

    Minimises ``weight * T**2 * KL(soft_targets || softmax(model(x) / T))``
    with SGD (momentum 0.9) on the plain module (an Opacus wrapper, if given,
    is bypassed: public data is not private training).

    Parameters
    ----------
    model
        Student, trained in place.
    public_x
        ``[N_pub, *input_shape]`` public inputs.
    soft_targets
        ``[N_pub, C]`` probability rows (e.g. :func:`soft_labels_from_aggregate`).
    temperature
        ``T > 0`` applied to the student's logits.
    weight
        Distillation weight ``lambda >= 0``; 0 trains nothing.
    epochs, lr, batch_size
        Usual meaning (> 0).
    seed
        Seed of the shuffling order.
    logit_adjustment
        ``tau >= 0``: the student's logits get ``tau * log(pi)`` added in the loss,
        ``pi`` the teacher's class mass on the public set
        (:func:`target_log_prior`), so the student's raw logits learn the teacher's
        *balanced* scores (the logit-adjusted loss of Menon et al. 2021, with a
        public prior). 0 (the default) is plain distillation.

    Returns
    -------
    float
        The weighted loss on the whole public set after training.
    """
    check_positive(temperature=temperature, epochs=epochs, lr=lr, batch_size=batch_size)
    if not (math.isfinite(weight) and weight >= 0):
        raise LearningParameterInvalid(f"weight must be finite and >= 0, got {weight!r}")
    if not (math.isfinite(logit_adjustment) and logit_adjustment >= 0):
        raise LearningParameterInvalid(
            f"logit_adjustment must be finite and >= 0, got {logit_adjustment!r}"
        )
    targets = _check_targets(public_x, soft_targets)
    offset = None
    if logit_adjustment > 0:
        offset = logit_adjustment * target_log_prior(soft_targets, temperature=temperature)
    with _public_training(model) as student:
        _check_classes(student, public_x, targets)
        if weight > 0:
            _kl_epochs(
                student,
                public_x,
                targets,
                temperature,
                weight,
                int(epochs),
                lr,
                int(batch_size),
                seed,
                offset,
            )
        logits = torch.as_tensor(predict_logits(student, public_x))
        final = weight * float(_kl_loss(logits, targets, temperature, offset))
    logger.debug("distilled at T=%.3f, weight %.3f: loss %.5f", temperature, weight, final)
    return float(final)
