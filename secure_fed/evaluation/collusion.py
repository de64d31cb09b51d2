"""Colluding attackers that see the round's honest uploads (plaintext evaluation only).

The participant-side hook (:class:`~secure_fed.evaluation.attacks.Attack`) sees
only the attacker's own predictions. A stronger adversary, used by
``bench/secure_filter_quality.py`` to test the weighting's bound on a group's
weight, is a coalition that also sees every honest upload of the round (it
broke into the honest participants, or they leak): :func:`collude` gives the
hook the honest matrices and returns one upload per colluder. In the secure
modes no party sees these matrices; the evaluation grants them to the attacker
to bound what any upload could achieve.

Kinds (all clipped to the public bound):

* ``alie``: "A little is enough" (Baruch et al., NeurIPS 2019): every colluder
  sends ``mean - z * std`` cell by cell, the top class of the honest mean
  lowered and the others raised, ``z = Phi^-1((K - s) / K)``,
  ``s = floor(K / 2 + 1) - colluders``;
* ``honest_mean``: every colluder sends the honest mean (sits at the consensus);
* ``mean_jitter``: the honest mean plus independent small noise per colluder
  (near the consensus, but no two uploads identical);
* ``copy``: every colluder sends a copy of one honest participant's matrix;
* ``copy_jitter``: that copy plus independent small noise per colluder;
* ``confident``: the honest mean's top class at the bound and the others at
  minus the bound, with small noise per colluder: the largest evidence of
  correctness an upload can show without knowing the labels.

Randomness here is simulation noise from a seeded ``numpy`` generator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from scipy.stats import norm

from secure_fed.errors import AttackSpecInvalid, UnknownAttack

__all__ = ["COLLUSION_REGISTRY", "JITTER", "CollusionHook", "collude"]

#: Standard deviation of the per-colluder noise of the ``*_jitter`` and ``confident`` kinds.
JITTER = 0.3

#: ``(honest, colluders, participants, rng) -> one upload per colluder``.
CollusionHook = Callable[[Sequence[np.ndarray], int, int, np.random.Generator], list[np.ndarray]]


def _alie(
    honest: Sequence[np.ndarray], count: int, total: int, _rng: np.random.Generator
) -> list[np.ndarray]:
    s = total // 2 + 1 - count
    z = float(norm.ppf((total - s) / total))
    stack = np.stack(honest)
    mean, std = stack.mean(axis=0), stack.std(axis=0)
    sign = -np.ones_like(mean)
    sign[np.arange(len(mean)), mean.argmax(axis=1)] = 1.0
    return [mean - z * std * sign] * count


def _mean(
    honest: Sequence[np.ndarray], count: int, _total: int, _rng: np.random.Generator
) -> list[np.ndarray]:
    return [np.mean(np.stack(honest), axis=0)] * count


def _jitter(hook: CollusionHook) -> CollusionHook:
    def fn(
        honest: Sequence[np.ndarray], count: int, total: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        return [m + rng.normal(0.0, JITTER, size=m.shape) for m in hook(honest, count, total, rng)]

    return fn


def _copy(
    honest: Sequence[np.ndarray], count: int, _total: int, _rng: np.random.Generator
) -> list[np.ndarray]:
    return [np.asarray(honest[0], dtype=np.float64)] * count


def _confident(
    honest: Sequence[np.ndarray], count: int, _total: int, _rng: np.random.Generator
) -> list[np.ndarray]:
    mean = np.mean(np.stack(honest), axis=0)
    sent = -np.ones_like(mean)
    sent[np.arange(len(mean)), mean.argmax(axis=1)] = 1.0
    return [sent * 1e6] * count  # clipped to the bound by collude()


#: Collusion kinds: name -> hook.
COLLUSION_REGISTRY: dict[str, CollusionHook] = {
    "alie": _alie,
    "honest_mean": _mean,
    "mean_jitter": _jitter(_mean),
    "copy": _copy,
    "copy_jitter": _jitter(_copy),
    "confident": _jitter(_confident),
}


def collude(
    kind: str | CollusionHook,
    honest: Mapping[str, np.ndarray],
    colluders: Sequence[str],
    *,
    bound: float,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Return the colluders' uploads, given every honest upload of the round.

    ``kind`` is a registered name or any hook. Honest matrices are taken in
    sorted id order (``copy`` copies the first).

    Raises
    ------
    UnknownAttack
        If ``kind`` is not registered (the message lists the kinds).
    AttackSpecInvalid
        If there is no honest upload or colluder, or a hook returns the wrong
        number or shape of uploads, or NaN.
    """
    hook = COLLUSION_REGISTRY.get(kind) if isinstance(kind, str) else kind
    if hook is None:
        raise UnknownAttack(f"unknown collusion {kind!r}; registered: {sorted(COLLUSION_REGISTRY)}")
    if not honest or not colluders:
        raise AttackSpecInvalid("a collusion needs honest uploads and at least one colluder")
    mats = [np.asarray(honest[p], dtype=np.float64) for p in sorted(honest)]
    rng = np.random.default_rng(seed)
    sent = hook(mats, len(colluders), len(honest) + len(colluders), rng)
    if len(sent) != len(colluders):
        raise AttackSpecInvalid(f"the hook sent {len(sent)} uploads for {len(colluders)}")
    out = {}
    for pid, m in zip(colluders, sent, strict=True):
        arr = np.asarray(m, dtype=np.float64)
        if arr.shape != mats[0].shape or np.isnan(arr).any():
            raise AttackSpecInvalid(f"the hook's upload for {pid!r} is malformed")
        out[pid] = np.clip(arr, -bound, bound).astype(np.float32)
    return out
