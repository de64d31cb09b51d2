"""Noise flooding of decrypted CKKS results (Li and Micciancio, EUROCRYPT 2021).

A CKKS decryption returns ``m + e`` where ``e`` depends on the secret key and the
encryption randomness; anyone who sees both a ciphertext and its decryption can
set up linear equations in the secret key (Li, Micciancio, "On the Security of
Homomorphic Encryption on Approximate Numbers", ePrint 2020/1533). The key
authority therefore adds fresh Gaussian noise of standard deviation ``sigma``
to every decrypted value before it leaves.

Size of the noise. Li, Micciancio, Schultz and Sorrell (CRYPTO 2022) show that
Gaussian flooding with ``sigma >= E * 2^(s/2) * sqrt(64 t)`` (``E``: bound of
the decryption error, ``t``: number of decryptions that are released, ``s``:
statistical security parameter) makes the released values statistically
``2^-s``-close to ones computed from the exact message. Each preset fixes
``sigma`` so that the flooding stays inside its error budget; the ``s`` that
buys is reported by :func:`statistical_security_bits` and documented, with its
limits, in ``docs/crypto-ckks.md``.

Randomness. The noise comes from :func:`os.urandom` directly: 53-bit uniforms
turned into normal deviates by the Box-Muller transform (vectorized in numpy
for speed; numpy's own generators are not used).
"""

from __future__ import annotations

import math
import os

import numpy as np
from numpy.typing import NDArray

from crypto.ckks.presets import CkksPreset
from crypto.errors import ParameterInvalid

__all__ = ["csprng_normal", "flood", "statistical_security_bits"]

_TWO_53 = float(1 << 53)


def _uniform_open(count: int) -> NDArray[np.float64]:
    """Uniform doubles in (0, 1] from os.urandom (53 random bits each)."""
    raw = np.frombuffer(os.urandom(8 * count), dtype=np.uint64)
    return ((raw >> np.uint64(11)).astype(np.float64) + 1.0) / _TWO_53


def csprng_normal(count: int) -> NDArray[np.float64]:
    """Return ``count`` standard normal deviates drawn from os.urandom.

    Raises
    ------
    ParameterInvalid
        If ``count`` is negative or not an integer.
    """
    if not isinstance(count, int) or count < 0:
        raise ParameterInvalid(f"count must be a nonnegative integer, got {count!r}")
    half = (count + 1) // 2
    u1, u2 = _uniform_open(half), _uniform_open(half)
    radius = np.sqrt(-2.0 * np.log(u1))
    angle = 2.0 * math.pi * u2
    both = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])
    return both[:count]


def flood(values: NDArray[np.float64], *, sigma: float) -> NDArray[np.float64]:
    """Return ``values + N(0, sigma^2)`` noise (fresh, CSPRNG) per element.

    Raises
    ------
    ParameterInvalid
        If ``sigma`` is not a positive finite number.
    """
    if not (isinstance(sigma, float) and math.isfinite(sigma) and sigma > 0):
        raise ParameterInvalid(f"sigma must be a positive finite float, got {sigma!r}")
    array = np.asarray(values, dtype=np.float64)
    noise = csprng_normal(array.size).reshape(array.shape)
    return array + sigma * noise


def statistical_security_bits(preset: CkksPreset, *, decryptions: int = 1) -> float:
    """Statistical security ``s`` of the preset's flooding for ``t`` decryptions.

    Solves ``sigma = E * 2^(s/2) * sqrt(64 t)`` for ``s`` with the preset's
    ``flood_sigma`` and ``decryption_error_bound`` (:meth:`CkksPreset.flood_bits`;
    each decrypted ciphertext is one decryption).

    Raises
    ------
    ParameterInvalid
        If ``decryptions`` is not a positive integer.
    """
    return preset.flood_bits(decryptions)
