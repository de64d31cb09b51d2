"""Registry of participant architectures that Opacus can train privately.

Heterogeneous federated distillation (FedMD, Li and Wang 2019; FedDF, Lin et al.
2020) lets every participant keep its own architecture; only predictions on the
public set are exchanged. The registry holds four architectures
(``docs/learning.md``, section 1): an MLP, a CNN with GroupNorm (Wu and He
2018; BatchNorm mixes examples of a batch and cannot be made private by
Opacus), a small transformer (Vaswani et al. 2017) whose attention is written
with ``Linear`` layers so Opacus computes per-sample gradients, and logistic
regression. Every model takes inputs of the task's ``input_shape`` (images
``(C, H, W)`` or flat feature vectors ``(F,)``) and returns logits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from opacus.utils.module_utils import trainable_modules
from opacus.validators import ModuleValidator
from torch import nn

from secure_fed.errors import LearningParameterInvalid, ModelUnsupported, UnknownModel

__all__ = [
    "MODEL_REGISTRY",
    "build_model",
    "check_private_compatible",
    "parameter_count",
]

logger = logging.getLogger(__name__)

Builder = Callable[[tuple[int, ...], int], nn.Module]


def _flat_size(input_shape: tuple[int, ...]) -> int:
    return int(math.prod(input_shape))


def _mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    hidden = 64
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(_flat_size(input_shape), hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def _logreg(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(_flat_size(input_shape), num_classes))


class _FlatToSignal(nn.Module):
    """Reshape a flat feature vector ``(B, F)`` to a one-channel signal ``(B, 1, F)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # explicit size: DP-SGD's Poisson sampling can draw an empty batch, where -1 is ambiguous
        return x.reshape(x.shape[0], 1, math.prod(x.shape[1:]))


def _cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Two conv blocks (8 and 16 channels) with GroupNorm, pooled, then a linear head.

    Images ``(C, H, W)`` use 2-d convolutions; flat tables ``(F,)`` use 1-d
    convolutions over the feature axis (a hospital-style table still gets a CNN).
    """
    if len(input_shape) == 3:
        conv: type[nn.Conv1d] | type[nn.Conv2d] = nn.Conv2d
        pool: nn.Module = nn.AdaptiveAvgPool2d((2, 2))
        channels, pooled = input_shape[0], 16 * 4
        head: list[nn.Module] = []
    else:
        conv, pool = nn.Conv1d, nn.AdaptiveAvgPool1d(4)
        channels, pooled = 1, 16 * 4
        head = [_FlatToSignal()]
    return nn.Sequential(
        *head,
        conv(channels, 8, kernel_size=3, padding=1),
        nn.GroupNorm(2, 8),
        nn.ReLU(),
        conv(8, 16, kernel_size=3, padding=1),
        nn.GroupNorm(4, 16),
        nn.ReLU(),
        pool,
        nn.Flatten(),
        nn.Linear(pooled, num_classes),
    )


class _Tokenizer(nn.Module):
    """Cut an input into tokens: 4x4 patches of an image, or chunks of a table row."""

    def __init__(self, input_shape: tuple[int, ...], patch: int = 4) -> None:
        super().__init__()
        self.input_shape = input_shape
        self.patch = patch
        if len(input_shape) == 3 and input_shape[1] % patch == 0 and input_shape[2] % patch == 0:
            c, h, w = input_shape
            self.image = True
            self.tokens = (h // patch) * (w // patch)
            self.token_dim = c * patch * patch
            self.pad = 0
        else:
            flat = _flat_size(input_shape)
            self.image = False
            self.tokens = 4
            self.token_dim = math.ceil(flat / self.tokens)
            self.pad = self.tokens * self.token_dim - flat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        if self.image:
            p = self.patch
            c = x.shape[1]
            x = x.unfold(2, p, p).unfold(3, p, p)  # B, C, H/p, W/p, p, p
            x = x.permute(0, 2, 3, 1, 4, 5).reshape(b, self.tokens, c * p * p)
            return x
        x = x.reshape(b, math.prod(x.shape[1:]))
        if self.pad:
            x = nn.functional.pad(x, (0, self.pad))
        return x.reshape(b, self.tokens, self.token_dim)


class _Attention(nn.Module):
    """Multi-head self-attention from ``Linear`` layers (per-sample gradients in Opacus)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # B, H, T, d_h
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mixed = scores.softmax(dim=-1) @ v
        out: torch.Tensor = self.out(mixed.transpose(1, 2).reshape(b, t, d))
        return out


class _TinyTransformer(nn.Module):
    """One pre-norm encoder layer (d=32, 2 heads) over 4 tokens, mean-pooled."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dim: int = 32) -> None:
        super().__init__()
        self.tokenizer = _Tokenizer(input_shape)
        self.embed = nn.Linear(self.tokenizer.token_dim, dim)
        self.position = nn.Embedding(self.tokenizer.tokens, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attention = _Attention(dim, heads=2)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norm_out = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.tokenizer(x)
        positions = torch.arange(tokens.shape[1], device=x.device).expand(tokens.shape[0], -1)
        h = self.embed(tokens) + self.position(positions)
        h = h + self.attention(self.norm1(h))
        h = h + self.mlp(self.norm2(h))
        logits: torch.Tensor = self.head(self.norm_out(h).mean(dim=1))
        return logits


def _transformer(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return _TinyTransformer(input_shape, num_classes)


MODEL_REGISTRY: dict[str, Builder] = {
    "mlp": _mlp,
    "cnn": _cnn,
    "transformer": _transformer,
    "logreg": _logreg,
}
"""Model name -> builder ``(input_shape, num_classes) -> nn.Module``."""


def build_model(
    name: str, *, input_shape: tuple[int, ...], num_classes: int, seed: int
) -> nn.Module:
    """Build a registered architecture with deterministic initial weights.

    Parameters
    ----------
    name
        A key of :data:`MODEL_REGISTRY`.
    input_shape
        Shape of one example without the batch axis: ``(C, H, W)`` or ``(F,)``.
    num_classes
        Number of output logits (>= 2).
    seed
        Seed of the weight initialisation (the global torch RNG is left untouched).

    Returns
    -------
    torch.nn.Module
        The model, in training mode, that passed :func:`check_private_compatible`.

    Raises
    ------
    UnknownModel
        ``name`` is not registered; the message lists the registered names.
    LearningParameterInvalid
        ``input_shape`` or ``num_classes`` is invalid.
    """
    if name not in MODEL_REGISTRY:
        raise UnknownModel(
            f"unknown model {name!r}; registered models: {', '.join(sorted(MODEL_REGISTRY))}"
        )
    if len(input_shape) not in (1, 3) or any(int(s) < 1 for s in input_shape):
        raise LearningParameterInvalid(
            f"input_shape must be (C, H, W) or (F,) with positive sizes, got {input_shape!r}"
        )
    if num_classes < 2:
        raise LearningParameterInvalid(f"num_classes must be >= 2, got {num_classes!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MODEL_REGISTRY[name](tuple(int(s) for s in input_shape), num_classes)
    check_private_compatible(model)
    logger.debug("built model %s with %d parameters", name, parameter_count(model))
    return model


def check_private_compatible(module: nn.Module) -> None:
    """Refuse a module that Opacus cannot train with per-sample clipping.

    Parameters
    ----------
    module
        Any torch module a participant brings.

    Raises
    ------
    ModelUnsupported
        The module has layers Opacus refuses (BatchNorm, stateful norms,
        ``nn.MultiheadAttention``, ``nn.LSTM``, trainable layers with buffers);
        the message lists every offending layer.

    Notes
    -----
    Applies Opacus' own per-layer validators (``ModuleValidator.VALIDATORS``,
    the checks of :meth:`opacus.validators.ModuleValidator.validate`) and the
    buffer check of :meth:`opacus.grad_sample.GradSampleModule.validate` to
    every trainable layer, naming each layer, before any private data is touched.
    """
    problems: list[str] = []
    for name, sub in trainable_modules(module):
        label = f"{name or '<root>'} ({type(sub).__name__})"
        validator = ModuleValidator.VALIDATORS.get(type(sub))
        reasons = [str(e).split(". ")[0] for e in validator(sub)] if validator else []
        if any(True for _ in sub.buffers(recurse=False)):
            reasons.append("trainable layer with buffers (running statistics are not private)")
        problems += [f"{label}: {r}" for r in dict.fromkeys(reasons)]
    if not any(p.requires_grad for p in module.parameters()):
        problems.append("the module has no trainable parameters")
    if problems:
        raise ModelUnsupported(
            f"module {type(module).__name__} cannot be trained privately by Opacus; "
            f"offending layers: {'; '.join(problems)}"
        )


def parameter_count(module: nn.Module) -> int:
    """Count the trainable scalar parameters ``P_k`` of a module.

    Parameters
    ----------
    module
        The model.

    Returns
    -------
    int
        Sum of ``numel`` over parameters with ``requires_grad``.
    """
    return int(sum(p.numel() for p in module.parameters() if p.requires_grad))
