"""Aggregation interfaces and the registry of modes: the one place a mode is chosen.

One pluggable role with a registry (after Flower's ``Strategy`` and
Opacus' accountant registry). A mode has two halves that
never share state and talk only in bytes:

* participant side, :class:`UploadEncoder`: turns a ``[N_pub, C]`` prediction
  matrix into payload bytes (plaintext floats, CKKS ciphertexts, or one
  additive share plus a seed);
* server side, :class:`SecureAggregator`: validates payload bytes into opaque
  :class:`UploadHandle` objects, forms a weighted sum with **public** weights
  (an opaque :class:`AggregateHandle`, e.g. a ciphertext), scores every upload
  (one scalar per participant: the only per-participant value a secure mode
  may reveal), and reveals aggregates (identity in plaintext; a key-authority
  decryption or a share opening in the secure modes).

Scoring is per round: :meth:`SecureAggregator.scoring_round` returns a fresh
:class:`~secure_fed.secure.scoring.mahalanobis.ScoringBackend` holding that
round's uploads and round id, :meth:`SecureAggregator.score` runs the robust
pooled Mahalanobis estimate on it, and the backend is garbage afterwards. The
aggregator itself keeps no per-round state; the round id that labels
key-authority and helper requests is an argument of every revealing call.

A registered :class:`AggregationMode` builds everything its mode needs from a
:class:`~secure_fed.secure.deployment.DeploymentPlan` (key authority, helper,
enrolment secrets; for the gatekept modes in :mod:`secure_fed.secure.inprocess`)
and hands each side typed key objects;
:meth:`~secure_fed.secure.deployment.SecureDeployment.create` only looks the
mode up here and calls its ``deploy``.

Cross-cutting steps wrap instead of editing (after Flower's
``DifferentialPrivacyServerSideFixedClipping``): :class:`AggregatorWrapper`
delegates every call, so a subclass overrides one step.
"""

from __future__ import annotations

import functools
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from secure_fed.errors import AggregationInvalid, UnknownMode
from secure_fed.secure.scoring.mahalanobis import (
    ScoreReport,
    ScoringBackend,
    ScoringConfig,
    pooled_mahalanobis,
)

if TYPE_CHECKING:
    from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
    from secure_fed.secure.release_plan import ReleasePlan

__all__ = [
    "MODE_REGISTRY",
    "AggregateHandle",
    "AggregationMode",
    "AggregatorWrapper",
    "SecureAggregator",
    "UploadEncoder",
    "UploadHandle",
    "check_weights",
    "get_mode",
    "mode_names",
    "normalized_weights",
    "register_mode",
]

#: Modules whose import registers the built-in modes (loaded on first look-up): the
#: plaintext reference builds no party; the gatekept modes are registered with their
#: in-process deployments, which build the aggregator and its gatekeepers together.
BUILTIN_MODES = (
    "secure_fed.secure.modes.plaintext",
    "secure_fed.secure.inprocess.ckks",
    "secure_fed.secure.inprocess.shares",
)


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
    """Server side of a mode; sees only handles, never a participant's plaintext.

    Attributes
    ----------
    shape
        ``(N_pub, C)`` of every upload.
    scoring
        Parameters of the robust pooled Mahalanobis score.
    detects_copies
        True when :meth:`copies` needs the round's release plan to name its
        ``copies`` step (a gatekept mode); the engine's plan then names it.
    """

    shape: tuple[int, int]
    scoring: ScoringConfig
    detects_copies: bool = False

    def begin_round(self, plan: ReleasePlan) -> None:  # noqa: B027 (no gatekeeper: nothing to fix)
        """Fix ``plan`` as the round's release plan with the gatekeepers (none here)."""

    @abstractmethod
    def load(self, payload: bytes) -> UploadHandle:
        """Validate payload bytes and return a handle; raise ``UploadMalformed``."""

    @abstractmethod
    def weighted_sum(
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        """Return ``sum_k weights[k] * upload_k`` as an opaque aggregate."""

    @abstractmethod
    def reveal(self, aggregate: AggregateHandle, *, round_id: int) -> np.ndarray:
        """Return the plaintext ``[N_pub, C]`` aggregate (decrypt / open when secure)."""

    @abstractmethod
    def scoring_round(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> ScoringBackend:
        """Return a fresh scoring backend over ``handles`` for round ``round_id``.

        It reveals only aggregates over the handles and one scalar per upload,
        labelled with ``round_id``; discard it when the round's scores are known.
        """

    def evidence(
        self, handles: Mapping[str, UploadHandle], mask: np.ndarray, *, round_id: int
    ) -> dict[str, float] | None:
        """Return ``sum(mask * upload)`` per upload, or None when the mode does not compute it.

        ``mask`` is the public ``[N_pub, C]`` mask of the labeled slice
        (:func:`~secure_fed.secure.scoring.evidence.evidence_mask`): one scalar of a
        public linear function per participant.
        """
        return None

    def copies(
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> dict[str, int] | None:
        """Return each upload's count of near-duplicates, or None when the mode does not.

        ``handles`` is the accepted set: the counts are over it (the weights'
        ``u_k = 1 / (1 + copies_k)``, docs/learning.md).
        """
        return None

    def forward_upload(self, envelope: bytes, *, round_id: int) -> None:  # noqa: B027
        """Send an accepted upload's signed envelope to the mode's verifier (none here)."""

    def score(self, handles: Mapping[str, UploadHandle], *, round_id: int) -> ScoreReport:
        """Robust pooled Mahalanobis score of every upload (one scalar each).

        Raises
        ------
        ScoringInvalid
            If fewer than two uploads are given or the covariance degenerates.
        """
        backend = self.scoring_round(handles, round_id=round_id)
        return pooled_mahalanobis(
            backend, sorted(handles), num_samples=self.shape[0], config=self.scoring
        )


class AggregatorWrapper(SecureAggregator):
    """Delegate every call to ``inner``; subclasses override one step."""

    def __init__(self, inner: SecureAggregator) -> None:
        self.inner = inner
        self.shape, self.scoring = inner.shape, inner.scoring
        self.detects_copies = inner.detects_copies

    def begin_round(self, plan: ReleasePlan) -> None:  # noqa: D102
        self.inner.begin_round(plan)

    def load(self, payload: bytes) -> UploadHandle:  # noqa: D102
        return self.inner.load(payload)

    def forward_upload(self, envelope: bytes, *, round_id: int) -> None:  # noqa: D102
        self.inner.forward_upload(envelope, round_id=round_id)

    def weighted_sum(  # noqa: D102
        self, handles: Mapping[str, UploadHandle], weights: Mapping[str, float]
    ) -> AggregateHandle:
        return self.inner.weighted_sum(handles, weights)

    def reveal(self, aggregate: AggregateHandle, *, round_id: int) -> np.ndarray:  # noqa: D102
        return self.inner.reveal(aggregate, round_id=round_id)

    def scoring_round(  # noqa: D102
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> ScoringBackend:
        return self.inner.scoring_round(handles, round_id=round_id)

    def score(self, handles: Mapping[str, UploadHandle], *, round_id: int) -> ScoreReport:  # noqa: D102
        return self.inner.score(handles, round_id=round_id)

    def evidence(  # noqa: D102
        self, handles: Mapping[str, UploadHandle], mask: np.ndarray, *, round_id: int
    ) -> dict[str, float] | None:
        return self.inner.evidence(handles, mask, round_id=round_id)

    def copies(  # noqa: D102
        self, handles: Mapping[str, UploadHandle], *, round_id: int
    ) -> dict[str, int] | None:
        return self.inner.copies(handles, round_id=round_id)


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
        raise AggregationInvalid(
            f"weights and uploads differ: unknown {unknown}, missing {missing}"
        )
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


# --- registry -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AggregationMode:
    """A registered mode: its name, what it protects, and how it is deployed.

    Parameters
    ----------
    name
        What uploads, round configs and ``--mode`` say.
    insecure
        True when the aggregator sees every participant's predictions.
    central_dp
        True when the mode can add central DP noise before the aggregator sees a
        published aggregate (a party other than the aggregator must add it).
    description
        One line for help texts.
    deploy
        Builds the mode's parties and key material from a plan.
    """

    name: str
    insecure: bool
    central_dp: bool
    description: str
    deploy: Callable[[DeploymentPlan], SecureDeployment]


MODE_REGISTRY: dict[str, AggregationMode] = {}


def register_mode(mode: AggregationMode) -> None:
    """Add ``mode`` to :data:`MODE_REGISTRY` (refuses a different mode under a taken name)."""
    existing = MODE_REGISTRY.get(mode.name)
    if existing is not None and existing != mode:
        raise AggregationInvalid(f"mode {mode.name!r} is already registered")
    MODE_REGISTRY[mode.name] = mode


@functools.cache
def _load_builtin() -> None:
    for module in BUILTIN_MODES:
        importlib.import_module(module)


def mode_names() -> list[str]:
    """Sorted names of the registered modes (the built-in ones included)."""
    _load_builtin()
    return sorted(MODE_REGISTRY)


def get_mode(name: str) -> AggregationMode:
    """Return the registered mode called ``name``.

    Raises
    ------
    UnknownMode
        Listing the registered names.
    """
    _load_builtin()
    try:
        return MODE_REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownMode(
            f"unknown aggregation mode {name!r}; registered: {mode_names()}"
        ) from None
