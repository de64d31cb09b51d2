"""Clipping norms scaled per model: ``C_k = C_ref * sqrt(P_k / P_ref)``.

DP-SGD clips every example's gradient to norm ``C``. Participants run
different architectures, so one fixed ``C`` would clip a large model's
gradients much harder than a small one's. If every coordinate of a
per-example gradient has a similar magnitude, the gradient's L2 norm grows like
``sqrt(P_k)`` (``P_k`` the number of trainable parameters); scaling ``C_k`` the
same way keeps the fraction of the gradient that survives clipping comparable
across models. The noise is ``sigma * C_k``, so the choice of ``C_k`` does not
change privacy, only the step size (see ``docs/learning.md``, section 4).

:func:`clipping_norm` gives the flat norm; :func:`per_layer_clipping_norms`
splits it over parameter tensors for Opacus ``clipping="per_layer"`` with the
same total sensitivity.
"""

from __future__ import annotations

import math

from torch import nn

from secure_fed.errors import LearningParameterInvalid
from secure_fed.learning.models import parameter_count

__all__ = ["CLIPPING_MODES", "P_REF", "clipping_norm", "per_layer_clipping_norms"]

CLIPPING_MODES = ("flat", "per_layer")
"""Clipping modes of Opacus' ``make_private`` the trainer supports."""

P_REF = 1000
"""Reference parameter count: a model with ``P_REF`` parameters gets ``C_ref``."""


def clipping_norm(model: nn.Module, *, c_ref: float = 1.0, p_ref: int = P_REF) -> float:
    """Per-model clipping norm ``C_k = c_ref * sqrt(P_k / p_ref)``.

    Parameters
    ----------
    model
        The participant's model; ``P_k`` is its trainable parameter count.
    c_ref
        Clipping norm of a model with ``p_ref`` parameters (> 0).
    p_ref
        Reference parameter count (>= 1).

    Returns
    -------
    float
        ``C_k``; e.g. 1.0 for 1,000 parameters, 2.0 for 4,000.

    Raises
    ------
    LearningParameterInvalid
        ``c_ref`` or ``p_ref`` out of range, or the model has no parameters.
    """
    if not (math.isfinite(c_ref) and c_ref > 0):
        raise LearningParameterInvalid(f"c_ref must be a finite number > 0, got {c_ref!r}")
    if p_ref < 1:
        raise LearningParameterInvalid(f"p_ref must be >= 1, got {p_ref!r}")
    p_k = parameter_count(model)
    if p_k < 1:
        raise LearningParameterInvalid("model has no trainable parameters")
    return float(c_ref * math.sqrt(p_k / p_ref))


def per_layer_clipping_norms(
    model: nn.Module, *, c_ref: float = 1.0, p_ref: int = P_REF
) -> list[float]:
    """Per-parameter-tensor norms for Opacus ``clipping="per_layer"``.

    Tensor ``l`` with ``n_l`` entries gets ``C_l = C_k * sqrt(n_l / P_k)``, so
    ``sqrt(sum_l C_l**2) = C_k``: the total sensitivity equals the flat rule's.

    Parameters
    ----------
    model
        The model; one norm per trainable parameter tensor, in ``parameters()`` order.
    c_ref, p_ref
        As in :func:`clipping_norm`.

    Returns
    -------
    list of float
        The per-tensor norms.
    """
    total = clipping_norm(model, c_ref=c_ref, p_ref=p_ref)
    p_k = parameter_count(model)
    return [
        float(total * math.sqrt(p.numel() / p_k)) for p in model.parameters() if p.requires_grad
    ]
