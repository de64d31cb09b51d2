"""Poisoning participants, for evaluating filters and weighting (never for production).

The attacks act on what a participant *sends*: its ``[N_pub, C]`` matrix of
clipped logits on the public set, after honest prediction and before encoding.
They follow the families used to evaluate robust federated distillation
(e.g. FedMD/FedDF robustness studies; docs/background.md): label flipping
(logits of class ``c`` sent as class ``(c + shift) mod C``), Gaussian noise,
scaling, sign flipping, constant predictions, and a hook that takes any
function from honest predictions to sent predictions. Every output is clipped
to the public bound, as an upload must be to pass validation.

Randomness here is simulation noise from a seeded ``numpy`` generator
(reproducible evaluation), not key material.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from secure_fed.errors import AttackSpecInvalid, UnknownAttack

__all__ = ["ATTACK_REGISTRY", "Attack", "AttackSpec", "make_attack", "parse_attack_spec"]

Transform = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def _label_flip(shift: float) -> Transform:
    return lambda p, _rng: np.roll(p, int(shift), axis=1)


def _gaussian(sigma: float) -> Transform:
    return lambda p, rng: p + rng.normal(0.0, sigma, size=p.shape)


def _scaling(factor: float) -> Transform:
    return lambda p, _rng: p * factor


def _sign_flip(_: float) -> Transform:
    return lambda p, _rng: -p


def _constant(target: float) -> Transform:
    def fn(p: np.ndarray, _rng: np.random.Generator) -> np.ndarray:
        out = np.full_like(p, -np.inf)
        out[:, int(target) % p.shape[1]] = np.inf
        return out

    return fn


@dataclass(frozen=True)
class _Kind:
    build: Callable[[float], Transform]
    default: float
    doc: str


#: Attack kinds: name -> (builder, default strength, description).
ATTACK_REGISTRY: dict[str, _Kind] = {
    "label_flip": _Kind(_label_flip, 1.0, "send class c's logits as class (c + shift) mod C"),
    "gaussian": _Kind(_gaussian, 8.0, "add N(0, sigma^2) noise to every logit"),
    "scaling": _Kind(_scaling, 10.0, "multiply logits by a factor (then clipped to the bound)"),
    "sign_flip": _Kind(_sign_flip, 0.0, "negate every logit"),
    "constant": _Kind(_constant, 0.0, "always predict one class with maximal confidence"),
}


@dataclass(frozen=True)
class Attack:
    """A transform from honest to sent predictions, clipped to ``bound``.

    Parameters
    ----------
    name
        Registry name, or ``"custom"`` for a hook.
    transform
        ``(honest, rng) -> sent``; any function of the honest matrix.
    bound
        Public bound the sent matrix is clipped to.
    seed
        Seed of the simulation noise generator.
    """

    name: str
    transform: Transform
    bound: float = 8.0
    seed: int = 0
    _rng: np.random.Generator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not callable(self.transform):
            raise AttackSpecInvalid(f"transform must be callable, got {self.transform!r}")
        if not (math.isfinite(self.bound) and self.bound > 0):
            raise AttackSpecInvalid(f"bound must be a finite number > 0, got {self.bound!r}")
        object.__setattr__(self, "_rng", np.random.default_rng(self.seed))

    @classmethod
    def hook(cls, fn: Callable[[np.ndarray], np.ndarray], *, bound: float = 8.0) -> Attack:
        """Wrap any ``honest -> sent`` function as an attack."""
        return cls("custom", lambda p, _rng: fn(p), bound=bound)

    def __call__(self, honest: np.ndarray) -> np.ndarray:
        """Return the poisoned matrix (float32, same shape, within the bound).

        Raises
        ------
        AttackSpecInvalid
            If the transform changes the shape or returns NaN.
        """
        arr = np.asarray(honest, dtype=np.float64)
        sent = np.asarray(self.transform(arr.copy(), self._rng), dtype=np.float64)
        if sent.shape != arr.shape:
            raise AttackSpecInvalid(f"attack {self.name!r} changed shape {arr.shape}->{sent.shape}")
        if np.isnan(sent).any():
            raise AttackSpecInvalid(f"attack {self.name!r} produced NaN")
        return np.clip(sent, -self.bound, self.bound).astype(np.float32)


def make_attack(
    kind: str, *, strength: float | None = None, bound: float = 8.0, seed: int = 0
) -> Attack:
    """Build a registered attack.

    Raises
    ------
    UnknownAttack
        Listing the registered kinds.
    """
    entry = ATTACK_REGISTRY.get(kind) if isinstance(kind, str) else None
    if entry is None:
        raise UnknownAttack(f"unknown attack {kind!r}; registered: {sorted(ATTACK_REGISTRY)}")
    value = entry.default if strength is None else float(strength)
    if not math.isfinite(value):
        raise AttackSpecInvalid(f"strength of {kind!r} must be finite, got {strength!r}")
    return Attack(kind, entry.build(value), bound=bound, seed=seed)


@dataclass(frozen=True)
class AttackSpec:
    """``KIND:COUNT`` from the command line: ``count`` participants run ``kind``."""

    kind: str
    count: int


def parse_attack_spec(text: str, *, participants: int | None = None) -> AttackSpec:
    """Parse ``KIND:COUNT`` (e.g. ``sign_flip:2``).

    Raises
    ------
    AttackSpecInvalid
        On a missing colon, a non-positive count, or more attackers than participants.
    UnknownAttack
        If ``KIND`` is not registered (the message lists the registered kinds).
    """
    kind, sep, count_text = (text or "").partition(":")
    if not sep or not kind:
        raise AttackSpecInvalid(f"--attack must look like KIND:COUNT, got {text!r}")
    if kind not in ATTACK_REGISTRY:
        raise UnknownAttack(f"unknown attack {kind!r}; registered: {sorted(ATTACK_REGISTRY)}")
    if not count_text.isdigit() or int(count_text) < 1:
        raise AttackSpecInvalid(f"--attack COUNT must be a positive integer, got {count_text!r}")
    count = int(count_text)
    if participants is not None and count >= participants:
        raise AttackSpecInvalid(
            f"--attack count {count} leaves no honest participant out of {participants}"
        )
    return AttackSpec(kind, count)
