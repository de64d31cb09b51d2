"""Fixed-point codec from bounded reals into the ring Z_2^64.

A real ``x`` with ``|x| <= B`` (the public clip bound) is encoded as the ring
element ``round(x * 2^f) mod 2^64`` (two's complement), where ``f`` is the number
of fractional bits. This is the fixed-point representation of SecureML
(Mohassel-Zhang, IEEE S&P 2017, section 4.1) and ABY3 (Mohassel-Rindal, CCS 2018).

Sums of ``K`` encoded values stay exact while ``K * B * 2^f < 2^63``; products of
two encoded values carry ``2f`` fractional bits and are decoded with
``frac_bits=2 * f`` once opened (see ``docs/crypto-shares.md`` for every bound).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crypto.errors import EncodingOverflow, ParameterInvalid
from crypto.shares._ring import SIGNED_LIMIT, RingArray, as_ring, signed

MAX_FRAC_BITS = 40
"""Upper limit on fractional bits accepted by :class:`FixedPointCodec`."""


@dataclass(frozen=True, kw_only=True)
class FixedPointCodec:
    """Public fixed-point parameters: clip bound, fractional bits, participant maximum.

    Parameters
    ----------
    name
        Preset name, used in logs and error messages.
    clip_bound
        Public bound ``B``: values must satisfy ``|x| <= B``.
    frac_bits
        Fractional bits ``f``; the resolution is ``2^-f``.
    max_participants
        Documented ``K_max``: sums of up to this many encoded values never wrap.

    Raises
    ------
    ParameterInvalid
        If a parameter is out of range or ``K_max * B * 2^f >= 2^63``.

    Notes
    -----
    Rounding error of one encoding is at most ``2^-(f+1)``.
    """

    name: str
    clip_bound: float
    frac_bits: int
    max_participants: int
    bound_int: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ParameterInvalid("name must be a non-empty string")
        if not isinstance(self.frac_bits, int) or not 0 <= self.frac_bits <= MAX_FRAC_BITS:
            raise ParameterInvalid(
                f"frac_bits must be an int in [0, {MAX_FRAC_BITS}], got {self.frac_bits!r}"
            )
        bound = float(self.clip_bound)
        if not math.isfinite(bound) or bound <= 0:
            raise ParameterInvalid(f"clip_bound must be finite and > 0, got {self.clip_bound!r}")
        if not isinstance(self.max_participants, int) or self.max_participants < 1:
            raise ParameterInvalid(
                f"max_participants must be an int >= 1, got {self.max_participants!r}"
            )
        bound_int = math.floor(bound * (1 << self.frac_bits) + 0.5)
        object.__setattr__(self, "bound_int", bound_int)
        if self.max_participants * bound_int >= SIGNED_LIMIT:
            raise ParameterInvalid(
                f"max_participants={self.max_participants} with clip_bound={bound} and "
                f"frac_bits={self.frac_bits} would wrap the ring: K_max * B * 2^f >= 2^63"
            )

    @property
    def scale(self) -> int:
        """Return ``2^f``, the integer scale of one encoded unit."""
        return 1 << self.frac_bits

    def encode(self, values: Any) -> RingArray:
        """Encode reals with ``|x| <= B`` into ring elements.

        Parameters
        ----------
        values
            Array-like of finite floats.

        Returns
        -------
        numpy.ndarray
            ``uint64`` array of the same shape.

        Raises
        ------
        EncodingOverflow
            If a value is not finite or lies outside ``[-B, B]``. The message
            gives the count of offending values, never the values.
        """
        array = np.asarray(values, dtype=np.float64)
        bad = ~np.isfinite(array) | (np.abs(array) > self.clip_bound)
        if bool(bad.any()):
            raise EncodingOverflow(
                f"{int(bad.sum())} of {array.size} values are outside the clip bound "
                f"[-{self.clip_bound}, {self.clip_bound}] of codec {self.name!r} "
                "(or not finite); use encode_clipped to clip explicitly"
            )
        return self._encode_checked(array)

    def encode_clipped(self, values: Any) -> RingArray:
        """Clip reals to ``[-B, B]`` explicitly, then encode them.

        Parameters
        ----------
        values
            Array-like of floats; NaN is still refused.

        Raises
        ------
        EncodingOverflow
            If a value is NaN (it has no clipped value).
        """
        array = np.asarray(values, dtype=np.float64)
        if bool(np.isnan(array).any()):
            raise EncodingOverflow(f"NaN cannot be clipped by codec {self.name!r}")
        return self._encode_checked(np.clip(array, -self.clip_bound, self.clip_bound))

    def _encode_checked(self, array: NDArray[np.float64]) -> RingArray:
        scaled = np.rint(array * float(self.scale)).astype(np.int64)
        np.clip(scaled, -self.bound_int, self.bound_int, out=scaled)
        return scaled.astype(np.uint64)

    def decode(self, values: RingArray, *, frac_bits: int | None = None) -> NDArray[np.float64]:
        """Decode ring elements (two's complement) back to floats.

        Parameters
        ----------
        values
            ``uint64`` ring array, typically an opened sum or product.
        frac_bits
            Fractional bits carried by ``values``; defaults to ``f``. Use ``2 * f``
            for an untruncated product of two encoded values.

        Raises
        ------
        ParameterInvalid
            If ``values`` is not a ``uint64`` array or ``frac_bits`` is negative.
        """
        ring = as_ring(values, name="values")
        bits = self.frac_bits if frac_bits is None else frac_bits
        if bits < 0 or bits > 62:
            raise ParameterInvalid(f"frac_bits must be in [0, 62], got {bits}")
        return signed(ring).astype(np.float64) / float(1 << bits)

    def check_participants(self, count: int) -> None:
        """Raise unless ``count`` encoded values can be summed without wrapping.

        Parameters
        ----------
        count
            Number of participants (summands).

        Raises
        ------
        EncodingOverflow
            If ``count > max_participants`` (the documented ``K_max``).
        ParameterInvalid
            If ``count < 1``.
        """
        if count < 1:
            raise ParameterInvalid(f"count must be >= 1, got {count}")
        if count > self.max_participants:
            raise EncodingOverflow(
                f"{count} participants exceed K_max={self.max_participants} of codec "
                f"{self.name!r}; the ring sum could wrap"
            )


RING_PREDICTIONS = FixedPointCodec(
    name="predictions", clip_bound=8.0, frac_bits=12, max_participants=1024
)
"""Logits clipped to [-8, 8], resolution 2^-12, up to 1024 participants."""

RING_WEIGHTS = FixedPointCodec(name="weights", clip_bound=1.0, frac_bits=16, max_participants=1024)
"""Public aggregation weights in [-1, 1], resolution 2^-16."""
