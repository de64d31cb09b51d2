"""Aggregation interface, a registry of modes, and the insecure plaintext reference.

One pluggable role with a registry (STYLE.md rule 3, after Flower's
``Strategy`` and Opacus' accountant registry). A mode has two halves that
never share state and talk only in bytes:

* participant side, :class:`UploadEncoder`: turns a ``[N_pub, C]`` prediction
  matrix into payload bytes (plaintext floats, CKKS ciphertexts, or one
  additive share plus a seed);
* server side, :class:`SecureAggregator`: validates payload bytes into opaque
  :class:`UploadHandle` objects, forms a weighted sum with **public** weights
  (an opaque :class:`AggregateHandle`, e.g. a ciphertext), scores every upload
  against an aggregate (one scalar per participant: the only per-participant
  value a secure mode may reveal), and reveals aggregates (identity here; a
  key-authority decryption or a share opening in the secure modes).

Cross-cutting steps wrap instead of editing (STYLE.md rule 4, after Flower's
``DifferentialPrivacyServerSideFixedClipping``): :class:`AggregatorWrapper`
delegates every call, so central DP noise overrides only ``reveal`` and an
outlier filter consumes only ``score``. ``InsecurePlaintextMode`` says in its
name that it protects nothing; it is the reference for tests and comparisons.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from secure_fed.errors import AggregationInvalid, UnknownMode
from secure_fed.federation.messages import decode_matrix, encode_matrix

__all__ = [
    "MODE_REGISTRY",
    "AggregateHandle",
    "AggregationMode",
    "AggregatorWrapper",
    "InsecurePlaintextAggregator",
    "InsecurePlaintextEncoder",
    "InsecurePlaintextMode",
    "SecureAggregator",
    "UploadEncoder",
    "UploadHandle",
    "check_weights",
    "normalized_weights",
    "get_mode",
    "register_mode",
]


class UploadHandle:
    """Opaque, validated server-side form of one upload (subclassed per mode)."""


class AggregateHandle:
    """Opaque server-side aggregate (a ciphertext, a pair of shares, or an array)."""


class UploadEncoder(ABC):
    """Participant side of a mode: predictions in, payload bytes out."""

    @abstractmethod
    def encode(self, predictions: np.ndarray) -> bytes:
        """Return the payload bytes for a ``[N_pub, C]`` prediction matrix."""


class SecureAggregator(ABC):
    """Server side of a mode; sees only handles, never a participant's plaintext."""

    @abstractmethod
    def load(self, payload: bytes) -> UploadHandle:
        """Validate payload bytes and return a handle; raise ``UploadMalformed``."""

    @abstractmethod
    def weighted_sum(self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]) -> AggregateHandle:  # noqa: E501
        """Return ``sum_k weights[k] * upload_k`` as an opaque aggregate."""

    @abstractmethod
    def score(self, handles: Mapping[str, UploadHandle], reference: AggregateHandle) -> dict[str, float]:  # noqa: E501
        """Return one non-negative distance score per upload from ``reference``."""

    @abstractmethod
    def reveal(self, aggregate: AggregateHandle) -> np.ndarray:
        """Return the plaintext ``[N_pub, C]`` aggregate (decrypt / open when secure)."""


class AggregatorWrapper(SecureAggregator):
    """Delegate every call to ``inner``; subclasses override one step.

    Central DP noise overrides :meth:`reveal` (noise after decryption, charged to
    the ledger); encryption-aware filters read :meth:`score`.
    """

    def __init__(self, inner: SecureAggregator) -> None:
        self.inner = inner

    def load(self, payload: bytes) -> UploadHandle:  # noqa: D102
        return self.inner.load(payload)

    def weighted_sum(self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]) -> AggregateHandle:  # noqa: D102,E501
        return self.inner.weighted_sum(handles, weights)

    def score(self, handles: Mapping[str, UploadHandle], reference: AggregateHandle) -> dict[str, float]:  # noqa: D102,E501
        return self.inner.score(handles, reference)

    def reveal(self, aggregate: AggregateHandle) -> np.ndarray:  # noqa: D102
        return self.inner.reveal(aggregate)


def check_weights(handles: Mapping[str, object], weights: Mapping[str, float]) -> None:
    """Refuse empty inputs, unknown ids, and negative or all-zero weights.

    Raises
    ------
    AggregationInvalid
        With the offending participant named.
    """
    if not handles:
        raise AggregationInvalid("no uploads to aggregate")
    unknown = sorted(set(weights) - set(handles))
    missing = sorted(set(handles) - set(weights))
    if unknown or missing:
        raise AggregationInvalid(f"weights and uploads differ: unknown {unknown}, missing {missing}")  # noqa: E501
    for pid, w in weights.items():
        if not np.isfinite(w) or w < 0:
            raise AggregationInvalid(f"weight of {pid!r} must be finite and >= 0, got {w!r}")
    if sum(weights.values()) <= 0:
        raise AggregationInvalid("weights must not all be zero")


def normalized_weights(
    handles: Mapping[str, object], weights: Mapping[str, float]
) -> tuple[list[str], list[float]]:
    """Check ``weights``, drop zero weights and renormalise the rest to sum 1.

    Returns
    -------
    ids, w
        The participant ids with positive weight, sorted, and their weights.

    Raises
    ------
    AggregationInvalid
        As :func:`check_weights`.
    """
    check_weights(handles, weights)
    ids = sorted(p for p in handles if weights[p] > 0)
    total = sum(float(weights[p]) for p in ids)
    return ids, [float(weights[p]) / total for p in ids]


# --- the insecure plaintext reference -------------------------------------------------


class _PlainUpload(UploadHandle):
    __slots__ = ("matrix",)

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix


class _PlainAggregate(AggregateHandle):
    __slots__ = ("matrix",)

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix


class InsecurePlaintextEncoder(UploadEncoder):
    """Send predictions in the clear (float32 ``SFMX`` frame). Protects nothing."""

    def __init__(self, *, shape: tuple[int, int], bound: float) -> None:
        self.shape, self.bound = shape, bound

    def encode(self, predictions: np.ndarray) -> bytes:
        """Clip to the public bound and frame as float32."""
        arr = np.asarray(predictions, dtype=np.float32)
        if arr.shape != self.shape:
            raise AggregationInvalid(f"predictions shape {arr.shape} differs from {self.shape}")
        return encode_matrix(np.clip(arr, -self.bound, self.bound))


class InsecurePlaintextAggregator(SecureAggregator):
    """Reference server: sees every upload in the clear. For tests and comparisons only."""

    def __init__(self, *, shape: tuple[int, int], bound: float) -> None:
        self.shape, self.bound = shape, bound

    def load(self, payload: bytes) -> UploadHandle:
        """Validate shape, finiteness and the public bound."""
        return _PlainUpload(decode_matrix(payload, shape=self.shape, bound=self.bound))

    def _matrices(self, handles: Mapping[str, UploadHandle]) -> dict[str, np.ndarray]:
        out = {}
        for pid, h in handles.items():
            if not isinstance(h, _PlainUpload):
                raise AggregationInvalid(f"handle of {pid!r} is not a plaintext upload")
            out[pid] = h.matrix.astype(np.float64)
        return out

    def weighted_sum(self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]) -> AggregateHandle:  # noqa: E501
        """Weighted sum in float64."""
        check_weights(handles, weights)
        mats = self._matrices(handles)
        total = sum(float(weights[pid]) * m for pid, m in mats.items())
        return _PlainAggregate(np.asarray(total, dtype=np.float64))

    def score(self, handles: Mapping[str, UploadHandle], reference: AggregateHandle) -> dict[str, float]:  # noqa: E501
        """Mean squared per-element distance from ``reference`` (reference score).

        The secure modes replace this by the pooled Mahalanobis score computed
        under encryption (ARCHITECTURE.md section 3.5).
        """
        if not isinstance(reference, _PlainAggregate):
            raise AggregationInvalid("reference is not a plaintext aggregate")
        return {
            pid: float(np.mean((m - reference.matrix) ** 2))
            for pid, m in self._matrices(handles).items()
        }

    def reveal(self, aggregate: AggregateHandle) -> np.ndarray:
        """Return the aggregate (no decryption needed: nothing was protected)."""
        if not isinstance(aggregate, _PlainAggregate):
            raise AggregationInvalid("aggregate is not a plaintext aggregate")
        return aggregate.matrix.astype(np.float32)


# --- registry -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AggregationMode:
    """A registered mode: a name, whether it is insecure, and its two factories.

    Factories take keyword arguments ``shape`` (``(N_pub, C)``) and ``bound``
    plus mode-specific key material (a CKKS public context, a helper address).
    """

    name: str
    insecure: bool
    description: str
    encoder: Callable[..., UploadEncoder]
    aggregator: Callable[..., SecureAggregator]


MODE_REGISTRY: dict[str, AggregationMode] = {}


def register_mode(mode: AggregationMode) -> None:
    """Add ``mode`` to :data:`MODE_REGISTRY` (refuses a different mode under a taken name)."""
    existing = MODE_REGISTRY.get(mode.name)
    if existing is not None and existing != mode:
        raise AggregationInvalid(f"mode {mode.name!r} is already registered")
    MODE_REGISTRY[mode.name] = mode


def get_mode(name: str) -> AggregationMode:
    """Return the registered mode called ``name``.

    Raises
    ------
    UnknownMode
        Listing the registered names.
    """
    try:
        return MODE_REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownMode(
            f"unknown aggregation mode {name!r}; registered: {sorted(MODE_REGISTRY)}"
        ) from None


#: The insecure plaintext reference mode (``--mode plaintext``).
InsecurePlaintextMode = AggregationMode(
    name="plaintext",
    insecure=True,
    description="INSECURE reference: the aggregator sees every participant's predictions",
    encoder=InsecurePlaintextEncoder,
    aggregator=InsecurePlaintextAggregator,
)
register_mode(InsecurePlaintextMode)
