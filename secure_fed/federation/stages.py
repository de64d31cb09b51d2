r"""Round protocol as an explicit state machine: stages, config, state, persistence.

After Flower's SecAgg+ workflow (stage constants, a state dataclass, out-of-order
steps rejected, every transition tested). One round (docs/architecture.md) moves
through::

    open -> collecting -> filtering -> aggregating -> published
      \________\____________\____________\-------> aborted

``published`` and ``aborted`` are terminal. The engine that drives the stages
lives in :mod:`secure_fed.federation.engine`; state is persisted through the small
:class:`RoundStore` protocol after every transition, so a restarted aggregator
resumes or aborts cleanly (docs/architecture.md, one round).
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from secure_fed.errors import RoundConfigInvalid, RoundOutOfOrder, SchemaInvalid
from secure_fed.federation.schema import RoundSchema

__all__ = [
    "TRANSITIONS",
    "RoundConfig",
    "RoundState",
    "RoundStore",
    "Stage",
    "UploadRecord",
    "advance",
]

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


class Stage(StrEnum):
    """Stages of one round."""

    OPEN = "open"
    COLLECTING = "collecting"
    FILTERING = "filtering"
    AGGREGATING = "aggregating"
    PUBLISHED = "published"
    ABORTED = "aborted"


#: Allowed transitions; anything else raises :class:`RoundOutOfOrder`.
TRANSITIONS: dict[Stage, frozenset[Stage]] = {
    Stage.OPEN: frozenset({Stage.COLLECTING, Stage.ABORTED}),
    Stage.COLLECTING: frozenset({Stage.FILTERING, Stage.ABORTED}),
    Stage.FILTERING: frozenset({Stage.AGGREGATING, Stage.ABORTED}),
    Stage.AGGREGATING: frozenset({Stage.PUBLISHED, Stage.ABORTED}),
    Stage.PUBLISHED: frozenset(),
    Stage.ABORTED: frozenset(),
}


@dataclass(frozen=True, kw_only=True)
class RoundConfig:
    """What the aggregator fixes when it opens a round (docs/architecture.md, one round, step 1).

    Parameters
    ----------
    round_id
        Strictly increasing round number (>= 0).
    public_set_id
        Name of the public reference set ``D_pub``.
    public_set_sm3
        Hex SM3 digest of ``D_pub`` (participants check it before predicting).
    schema
        The schema contract (MAJOR version and output spec).
    mode
        Aggregation mode name (``secure_fed.secure.mode.MODE_REGISTRY``).
    num_public
        Number of public samples ``N_pub`` (rows of every upload).
    min_participants
        Minimum accepted uploads for the round to complete (>= 1).
    deadline
        Unix time after which uploads are refused and collection closes.
    projection_seed
        Public seed for randomized projections of the secure modes (>= 0).
    max_upload_bytes
        Size limit checked before parsing any upload.
    max_weight
        Public cap on one participant's published weight, in ``(0, 1]``; at
        least ``1 / min_participants``, so every round that completes can meet
        it (docs/secure-aggregation.md, "Bounded influence"). Default (``None``):
        exactly ``1 / min_participants``, the most the consortium policy allows.
    """

    round_id: int
    public_set_id: str
    public_set_sm3: str
    schema: RoundSchema
    mode: str
    num_public: int
    min_participants: int
    deadline: float
    projection_seed: int
    max_upload_bytes: int = 16 * 1024 * 1024
    max_weight: float | None = None

    def __post_init__(self) -> None:
        ints = ("round_id", "num_public", "min_participants", "projection_seed", "max_upload_bytes")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise RoundConfigInvalid(f"{name} must be a non-negative integer, got {value!r}")
        if self.min_participants < 1:
            raise RoundConfigInvalid(f"min_participants must be >= 1, got {self.min_participants}")
        if self.num_public < 1:
            raise RoundConfigInvalid(f"num_public must be >= 1, got {self.num_public}")
        if not isinstance(self.public_set_id, str) or not _ID.match(self.public_set_id):
            raise RoundConfigInvalid(f"public_set_id is invalid: {self.public_set_id!r}")
        if not isinstance(self.public_set_sm3, str) or not _HEX64.match(self.public_set_sm3):
            raise RoundConfigInvalid("public_set_sm3 must be 64 lowercase hex characters")
        if not isinstance(self.schema, RoundSchema):
            raise RoundConfigInvalid(f"schema must be a RoundSchema, got {self.schema!r}")
        if not isinstance(self.mode, str) or not 0 < len(self.mode) <= 32:
            raise RoundConfigInvalid(f"mode is invalid: {self.mode!r}")
        if not isinstance(self.deadline, int | float) or not math.isfinite(self.deadline):
            raise RoundConfigInvalid(f"deadline must be a finite unix time, got {self.deadline!r}")
        if self.max_weight is None:
            object.__setattr__(self, "max_weight", 1.0 / self.min_participants)
        w = self.max_weight
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 < w <= 1:
            raise RoundConfigInvalid(f"max_weight must be in (0, 1], got {w!r}")
        if w * self.min_participants < 1 - 1e-12:
            raise RoundConfigInvalid(
                f"max_weight {w!r} is below 1/min_participants = 1/{self.min_participants}: "
                f"a round with that many participants could not meet it"
            )

    @property
    def cap(self) -> float:
        """The public weight cap with its default applied."""
        return float(self.max_weight if self.max_weight is not None else 1.0)

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        return {
            "round_id": self.round_id,
            "public_set_id": self.public_set_id,
            "public_set_sm3": self.public_set_sm3,
            "schema": self.schema.to_dict(),
            "mode": self.mode,
            "num_public": self.num_public,
            "min_participants": self.min_participants,
            "deadline": float(self.deadline),
            "projection_seed": self.projection_seed,
            "max_upload_bytes": self.max_upload_bytes,
            "max_weight": float(self.cap),
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RoundConfig:
        """Inverse of :meth:`to_dict`; raises :class:`RoundConfigInvalid`."""
        try:
            fields = dict(data)
            fields["schema"] = RoundSchema.from_dict(fields["schema"])
            fields.setdefault("max_weight", 1.0)  # stored before the cap existed: it had none
            return cls(**fields)  # type: ignore[arg-type]
        except (KeyError, TypeError, SchemaInvalid) as exc:
            raise RoundConfigInvalid(f"stored round config is invalid: {exc}") from exc


@dataclass(frozen=True, kw_only=True)
class UploadRecord:
    """An accepted upload, as persisted (payload kept so a restart can resume)."""

    participant_id: str
    nonce: str
    num_samples: int
    model_id: str
    version: str
    received_at: float
    payload: bytes


@dataclass(kw_only=True)
class RoundState:
    """Mutable state of one round; persisted after every transition."""

    config: RoundConfig
    stage: Stage = Stage.OPEN
    uploads: dict[str, UploadRecord] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)
    decisions: dict[str, dict[str, object]] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    weighting_history: dict[str, float] = field(default_factory=dict)
    publication_sm3: str | None = None
    publication: bytes | None = None
    reason: str | None = None
    log: list[tuple[str, float]] = field(default_factory=list)

    @property
    def round_id(self) -> int:
        """The round id of the config."""
        return self.config.round_id

    def seen_nonces(self) -> set[str]:
        """Nonces of every accepted upload."""
        return {u.nonce for u in self.uploads.values()}

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict (payloads base64)."""
        return {
            "config": self.config.to_dict(),
            "stage": self.stage.value,
            "uploads": {
                pid: {
                    **{k: v for k, v in vars(u).items() if k != "payload"},
                    "payload": base64.b64encode(u.payload).decode("ascii"),
                }
                for pid, u in self.uploads.items()
            },
            "scores": self.scores,
            "excluded": self.excluded,
            "decisions": self.decisions,
            "weights": self.weights,
            "weighting_history": self.weighting_history,
            "publication_sm3": self.publication_sm3,
            "publication": (
                None if self.publication is None else base64.b64encode(self.publication).decode()
            ),
            "reason": self.reason,
            "log": [list(entry) for entry in self.log],
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RoundState:
        """Inverse of :meth:`to_dict`."""
        uploads = {}
        for pid, raw in dict(data["uploads"]).items():  # type: ignore[call-overload]
            fields = dict(raw)
            fields["payload"] = base64.b64decode(fields["payload"])
            uploads[pid] = UploadRecord(**fields)
        return cls(
            config=RoundConfig.from_dict(data["config"]),  # type: ignore[arg-type]
            stage=Stage(str(data["stage"])),
            uploads=uploads,
            scores=dict(data["scores"]),  # type: ignore[call-overload]
            excluded=list(data["excluded"]),  # type: ignore[call-overload]
            decisions=dict(data.get("decisions", {})),  # type: ignore[call-overload]
            weights=dict(data["weights"]),  # type: ignore[call-overload]
            weighting_history=dict(data["weighting_history"]),  # type: ignore[call-overload]
            publication_sm3=data["publication_sm3"],  # type: ignore[arg-type]
            publication=_publication(data.get("publication")),
            reason=data["reason"],  # type: ignore[arg-type]
            log=[(str(s), float(t)) for s, t in data["log"]],  # type: ignore[attr-defined]
        )


def _publication(raw: object) -> bytes | None:
    """Decode the stored publication (None: unpublished, or stored before it was kept).

    Raises
    ------
    ValueError
        If the stored value is not base64 text.
    """
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ValueError("the stored publication is not base64 text")
    return base64.b64decode(raw, validate=True)


def advance(state: RoundState, target: Stage, *, at: float, reason: str | None = None) -> None:
    """Move ``state`` to ``target`` if :data:`TRANSITIONS` allows it.

    Raises
    ------
    RoundOutOfOrder
        Naming the current and the requested stage.
    """
    if target not in TRANSITIONS[state.stage]:
        allowed = sorted(s.value for s in TRANSITIONS[state.stage])
        raise RoundOutOfOrder(
            f"round {state.round_id}: cannot go from {state.stage.value!r} to {target.value!r} "
            f"(allowed: {allowed or 'none, the round is finished'})"
        )
    state.stage = target
    state.log.append((target.value, at))
    if reason is not None:
        state.reason = reason


class RoundStore(Protocol):
    """Where round state lives between transitions (a DB table or a folder)."""

    def save(self, state: RoundState) -> None:
        """Persist ``state`` atomically, replacing any earlier version."""

    def load(self, round_id: int) -> RoundState | None:
        """Return the stored state of ``round_id``, or None."""

    def open_rounds(self) -> list[RoundState]:
        """Return every stored round that is not ``published`` or ``aborted``."""

    def last_round_id(self) -> int | None:
        """Return the highest stored round id, or None when empty."""

    def rounds_with_payload(self, digest: str, *, other_than: int) -> list[int]:
        """Return the stored rounds but ``other_than`` that accepted a payload of this SM3."""
