"""Class-major packing of a ``[N_pub, C]`` prediction matrix into CKKS ciphertexts.

Ciphertext ``c * chunks + j`` holds class ``c`` for samples
``j * N/2 .. min((j + 1) * N/2, N_pub)``. With this layout a plaintext matrix
acting on the class axis (``z = L p``, the whitening step of the Mahalanobis
score) is a sum of plaintext-scalar multiples of whole ciphertexts: no slot
rotations (CKKS packing: Cheon, Kim, Kim, Song, ASIACRYPT 2017, section 3).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from crypto.ckks import _tenseal
from crypto.ckks._tenseal import TsVector
from crypto.ckks.keys import PublicContext, _public_ts
from crypto.ckks.presets import CkksPreset
from crypto.errors import ParameterInvalid

__all__ = ["EncryptedMatrix", "Kind", "Layout", "pack_class_major"]

logger = logging.getLogger(__name__)

Kind = Literal["upload", "aggregate", "score"]
KINDS: tuple[Kind, ...] = ("upload", "aggregate", "score")
MAX_SAMPLES = 1 << 24
MAX_CLASSES = 1 << 12


@dataclass(frozen=True, slots=True)
class Layout:
    """Explicit shape metadata of a class-major packing.

    Attributes
    ----------
    n_samples, n_classes
        Shape of the packed matrix ``[N_pub, C]``.
    slots
        Values per ciphertext (``N/2`` of the preset).
    """

    n_samples: int
    n_classes: int
    slots: int

    def __post_init__(self) -> None:
        for name, value, top in (
            ("n_samples", self.n_samples, MAX_SAMPLES),
            ("n_classes", self.n_classes, MAX_CLASSES),
        ):
            if not isinstance(value, int) or not 1 <= value <= top:
                raise ParameterInvalid(f"{name} must be an integer in [1, {top}], got {value!r}")

    @property
    def chunks(self) -> int:
        """Ciphertexts per class: ``ceil(n_samples / slots)``."""
        return -(-self.n_samples // self.slots)

    @property
    def count(self) -> int:
        """Ciphertexts in the whole packing."""
        return self.n_classes * self.chunks

    def run(self, chunk: int) -> tuple[int, int]:
        """Sample range ``[start, stop)`` held by chunk ``chunk`` of every class."""
        start = chunk * self.slots
        return start, min(start + self.slots, self.n_samples)

    def index(self, cls: int, chunk: int) -> int:
        """Position of (class, chunk) in the class-major ciphertext list."""
        return cls * self.chunks + chunk


class EncryptedMatrix:
    """Ciphertexts of one packed matrix plus the metadata a receiver checks.

    ``kind`` is ``"upload"`` (fresh, one participant), ``"aggregate"`` (weighted
    sum of uploads, ``weight_bits`` fractional bits for integer-encoded weights)
    or ``"score"`` (one encrypted scalar: a sum of squared distances).
    Build uploads with :func:`pack_class_major`, parse untrusted bytes with
    :func:`crypto.ckks.load_encrypted`.
    """

    __slots__ = (
        "contributors",
        "fingerprint",
        "kind",
        "layout",
        "preset",
        "vectors",
        "weight_bits",
    )

    def __init__(
        self,
        *,
        kind: Kind,
        preset: CkksPreset,
        fingerprint: bytes,
        layout: Layout,
        vectors: list[TsVector],
        weight_bits: int = 0,
        contributors: int = 1,
    ) -> None:
        if kind not in KINDS:
            raise ParameterInvalid(f"kind must be one of {', '.join(KINDS)}")
        expected = 1 if kind == "score" else layout.count
        if len(vectors) != expected:
            raise ParameterInvalid(f"vectors must hold {expected} ciphertexts, got {len(vectors)}")
        if not (isinstance(contributors, int) and 1 <= contributors <= 0xFFFF):
            raise ParameterInvalid(f"contributors must be in [1, 65535], got {contributors!r}")
        if not (isinstance(weight_bits, int) and 0 <= weight_bits <= 62):
            raise ParameterInvalid(f"weight_bits must be in [0, 62], got {weight_bits!r}")
        self.kind: Kind = kind
        self.preset = preset
        self.fingerprint = bytes(fingerprint)
        self.layout = layout
        self.vectors = vectors
        self.weight_bits = weight_bits
        self.contributors = contributors

    def __repr__(self) -> str:
        return (
            f"EncryptedMatrix({self.kind}, {self.preset.name}, "
            f"{self.layout.n_samples}x{self.layout.n_classes}, {len(self.vectors)} ct)"
        )

    def to_bytes(self) -> bytes:
        """Serialize (ciphertexts only, never the context); see :mod:`crypto.ckks.wire`."""
        from crypto.ckks.wire import dump_encrypted

        return dump_encrypted(self)


def _check_matrix(matrix: Any, bound: float) -> NDArray[np.float64]:
    try:
        array = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterInvalid("matrix must be a numeric [N_pub, C] array") from None
    if array.ndim != 2 or 0 in array.shape:
        raise ParameterInvalid(f"matrix must be a non-empty 2-D [N_pub, C] array: {array.shape}")
    if not np.isfinite(array).all():
        raise ParameterInvalid("matrix holds NaN or infinite values")
    if np.abs(array).max() > bound:
        raise ParameterInvalid(f"matrix values must lie in [-{bound}, {bound}] (clip first)")
    return array


def pack_class_major(public: PublicContext, matrix: Any) -> EncryptedMatrix:
    """Encrypt a ``[N_pub, C]`` prediction matrix class-major with the public key.

    Parameters
    ----------
    public
        The key epoch's public context.
    matrix
        Finite values clipped to the preset's ``input_bound``.

    Returns
    -------
    EncryptedMatrix
        ``kind="upload"``, ``C * ceil(N_pub / (N/2))`` ciphertexts.

    Raises
    ------
    ParameterInvalid
        Wrong shape, non-finite values or values beyond the clip bound.
    """
    ctx = _public_ts(public)
    preset = public.preset
    array = _check_matrix(matrix, preset.input_bound)
    layout = Layout(n_samples=array.shape[0], n_classes=array.shape[1], slots=preset.slots)
    vectors: list[TsVector] = []
    for cls in range(layout.n_classes):
        column = np.ascontiguousarray(array[:, cls])
        for chunk in range(layout.chunks):
            start, stop = layout.run(chunk)
            vectors.append(_tenseal.encrypt_vector(ctx, column[start:stop]))
    logger.debug("packed %d x %d into %d ciphertexts", *array.shape, len(vectors))
    return EncryptedMatrix(
        kind="upload", preset=preset, fingerprint=public.fingerprint, layout=layout, vectors=vectors
    )


def unpack_class_major(layout: Layout, runs: list[NDArray[np.float64]]) -> NDArray[np.float64]:
    """Reassemble decrypted class-major runs into a ``[N_pub, C]`` matrix."""
    out = np.empty((layout.n_samples, layout.n_classes), dtype=np.float64)
    for cls in range(layout.n_classes):
        for chunk in range(layout.chunks):
            start, stop = layout.run(chunk)
            out[start:stop, cls] = runs[layout.index(cls, chunk)][: stop - start]
    return out
