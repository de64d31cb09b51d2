"""Helpers for the ring Z_2^64 held in ``numpy.uint64`` arrays.

Arithmetic on ``uint64`` arrays wraps modulo 2^64, which is exactly the ring
of the additive sharing scheme (ABY, Demmler-Schneider-Zohner, NDSS 2015;
SecureML, Mohassel-Zhang, IEEE S&P 2017). A ring element ``v`` stands for the
signed integer ``v - 2^64`` when ``v >= 2^63`` (two's complement).

Random ring elements come from ``os.urandom`` only, never from numpy's
default generator.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crypto.errors import ParameterInvalid

RING_BITS = 64
"""Bit width of the ring; shares live in Z_2^RING_BITS."""

RING_ID = 64
"""Ring identifier written into every serialized share header."""

SIGNED_LIMIT = 1 << (RING_BITS - 1)
"""Magnitudes strictly below this are represented without wrapping."""

RingArray = NDArray[np.uint64]


def random_ring(count: int) -> RingArray:
    """Return ``count`` ring elements drawn uniformly from ``os.urandom``.

    Parameters
    ----------
    count
        Number of elements, at least 0.

    Returns
    -------
    numpy.ndarray
        Flat ``uint64`` array of uniform ring elements.
    """
    if count < 0:
        raise ParameterInvalid(f"count must be >= 0, got {count}")
    return np.frombuffer(os.urandom(8 * count), dtype="<u8").astype(np.uint64)


def as_ring(values: Any, *, name: str) -> RingArray:
    """Check that ``values`` is a ``uint64`` array and return it.

    Parameters
    ----------
    values
        Candidate ring array.
    name
        Parameter name used in the error message.

    Raises
    ------
    ParameterInvalid
        If ``values`` is not a numpy array of dtype ``uint64``.
    """
    if not isinstance(values, np.ndarray) or values.dtype != np.uint64:
        kind = getattr(values, "dtype", type(values).__name__)
        raise ParameterInvalid(f"{name} must be a numpy uint64 ring array, got {kind}")
    return values


def same_shape(first: RingArray, second: RingArray, *, what: str) -> None:
    """Raise :class:`ParameterInvalid` unless both arrays have one shape."""
    if first.shape != second.shape:
        raise ParameterInvalid(f"{what}: shapes differ, {first.shape} vs {second.shape}")


def check_party(party: int) -> int:
    """Return ``party`` if it is 0 or 1, else raise :class:`ParameterInvalid`."""
    if party not in (0, 1):
        raise ParameterInvalid(f"party must be 0 or 1, got {party!r}")
    return party


def to_ring_int(values: Any) -> RingArray:
    """Map signed integers (Python or numpy) into the ring by two's complement.

    Parameters
    ----------
    values
        Integer scalar or array with every magnitude below 2^63; a ``uint64``
        array is already a ring array and is returned unchanged.

    Raises
    ------
    ParameterInvalid
        If a value is not an integer or does not fit in a signed 64-bit integer.
    """
    try:
        array = np.asarray(values)
        if array.dtype == np.uint64:
            return array
        if array.dtype.kind not in "iubO":
            raise ParameterInvalid(f"ring factors must be integers, got dtype {array.dtype}")
        signed_values = np.asarray(array, dtype=np.int64)
    except (OverflowError, TypeError) as exc:
        raise ParameterInvalid("integer does not fit in a signed 64-bit ring value") from exc
    return signed_values.astype(np.uint64)


def signed(values: RingArray) -> NDArray[np.int64]:
    """Return the two's-complement signed view of ring elements."""
    return values.view(np.int64)
