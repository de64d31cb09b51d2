"""Model schema registry with semantic-version contracts.

A model topology registry with a schema version contract: every participant
declares a model id, a semantic version (``MAJOR.MINOR.PATCH``,
https://semver.org) and the spec of what it uploads. A round fixes a
:class:`RoundSchema` (a MAJOR version and an :class:`OutputSpec`); an upload
whose MAJOR version or output spec differs is refused with a typed error,
while MINOR changes (an adapter can load them) and PATCH changes (nothing the
aggregate sees changed) pass.

In federated distillation the only tensor that crosses the boundary is the
prediction matrix on the public set, so the output spec is the whole contract:
number of classes, representation and the public bound on every value.

Serialized forms are canonical JSON (:mod:`privacy_ledger.audit.canonical`,
no floats): the bound is an exact decimal string (``8.0`` -> ``"8.0"``), and
:meth:`RoundSchema.schema_hash` is the SM3 digest of those bytes. This is the
version-2 schema hash carried by ``upload`` frames of version 2
(``docs/wire.md``); the earlier float encoding hashed differently.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from crypto.sm.sm3 import sm3_digest
from privacy_ledger.audit import canonical
from secure_fed.errors import (
    OutputSpecMismatch,
    SchemaInvalid,
    SchemaMajorMismatch,
    SchemaUnknown,
)
from secure_fed.wire import decimal_text, number_from_wire

__all__ = [
    "REPRESENTATIONS",
    "ModelSchema",
    "OutputSpec",
    "RoundSchema",
    "SchemaRegistry",
    "SemVer",
]

#: Allowed prediction representations. ``clipped_logits``: per-sample centered
#: logits clipped to ``[-bound, bound]`` (see ``secure_fed.learning.distill``).
REPRESENTATIONS = ("clipped_logits",)

_SEMVER = re.compile(r"^(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})\.(0|[1-9]\d{0,5})$")
_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


@dataclass(frozen=True, order=True)
class SemVer:
    """A semantic version ``MAJOR.MINOR.PATCH`` (non-negative integers)."""

    major: int
    minor: int
    patch: int

    def __post_init__(self) -> None:
        for name in ("major", "minor", "patch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 10**6:
                raise SchemaInvalid(f"version.{name} must be an integer in [0, 1e6), got {value!r}")

    @classmethod
    def parse(cls, text: str) -> SemVer:
        """Parse ``"MAJOR.MINOR.PATCH"``.

        Raises
        ------
        SchemaInvalid
            If ``text`` is not three dot-separated integers without leading zeros.
        """
        match = _SEMVER.match(text) if isinstance(text, str) else None
        if match is None:
            raise SchemaInvalid(f"version must look like MAJOR.MINOR.PATCH, got {text!r}")
        return cls(int(match[1]), int(match[2]), int(match[3]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


@dataclass(frozen=True, kw_only=True)
class OutputSpec:
    """What a participant uploads: a ``[N_pub, num_classes]`` matrix.

    Parameters
    ----------
    num_classes
        Number of classes ``C`` (>= 2).
    representation
        One of :data:`REPRESENTATIONS`.
    bound
        Public bound: every uploaded value lies in ``[-bound, bound]`` (> 0).
    """

    num_classes: int
    representation: str = "clipped_logits"
    bound: float = 8.0

    def __post_init__(self) -> None:
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int):
            raise SchemaInvalid(f"num_classes must be an integer, got {self.num_classes!r}")
        if not 2 <= self.num_classes <= 10_000:
            raise SchemaInvalid(f"num_classes must be in [2, 10000], got {self.num_classes}")
        if self.representation not in REPRESENTATIONS:
            raise SchemaInvalid(
                f"representation must be one of {list(REPRESENTATIONS)}, "
                f"got {self.representation!r}"
            )
        if not (isinstance(self.bound, int | float) and math.isfinite(self.bound)):
            raise SchemaInvalid(f"bound must be a finite number, got {self.bound!r}")
        if not 0 < self.bound <= 1e6:
            raise SchemaInvalid(f"bound must be in (0, 1e6], got {self.bound!r}")

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        return {
            "num_classes": self.num_classes,
            "representation": self.representation,
            "bound": decimal_text(float(self.bound)),
        }

    @classmethod
    def from_dict(cls, data: object) -> OutputSpec:
        """Build from :meth:`to_dict` output, raising :class:`SchemaInvalid` on bad input.

        ``bound`` may be a decimal string (the wire form) or a number (stored
        round states written before the canonical encoding).
        """
        if not isinstance(data, dict) or set(data) != {"num_classes", "representation", "bound"}:
            raise SchemaInvalid(f"output spec must have num_classes/representation/bound: {data!r}")
        bound = data["bound"]
        number = bound if isinstance(bound, float) else number_from_wire(bound)
        if number is None:
            raise SchemaInvalid(f"bound must be a number or a decimal string, got {bound!r}")
        return cls(
            num_classes=data["num_classes"],
            representation=data["representation"],
            bound=number,
        )


@dataclass(frozen=True, kw_only=True)
class ModelSchema:
    """What a participant declares about its model.

    Parameters
    ----------
    model_id
        Globally unique model identifier (1-64 of ``[A-Za-z0-9_.-]``).
    version
        Semantic version of the model's schema.
    output
        The output spec of its uploads.
    """

    model_id: str
    version: SemVer
    output: OutputSpec

    def __post_init__(self) -> None:
        if not isinstance(self.model_id, str) or not _MODEL_ID.match(self.model_id):
            raise SchemaInvalid(f"model_id must be 1-64 of [A-Za-z0-9_.-], got {self.model_id!r}")
        if not isinstance(self.version, SemVer):
            raise SchemaInvalid(f"version must be a SemVer, got {self.version!r}")
        if not isinstance(self.output, OutputSpec):
            raise SchemaInvalid(f"output must be an OutputSpec, got {self.output!r}")

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        return {
            "model_id": self.model_id,
            "version": str(self.version),
            "output": self.output.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: object) -> ModelSchema:
        """Build from :meth:`to_dict` output, raising :class:`SchemaInvalid` on bad input."""
        if not isinstance(data, dict) or set(data) != {"model_id", "version", "output"}:
            raise SchemaInvalid(f"model schema must have model_id/version/output: {data!r}")
        return cls(
            model_id=data["model_id"],
            version=SemVer.parse(data["version"]),
            output=OutputSpec.from_dict(data["output"]),
        )


@dataclass(frozen=True, kw_only=True)
class RoundSchema:
    """The contract a round fixes: a MAJOR version and the output spec."""

    major: int
    output: OutputSpec

    def __post_init__(self) -> None:
        SemVer(self.major, 0, 0)  # validates the integer
        if not isinstance(self.output, OutputSpec):
            raise SchemaInvalid(f"output must be an OutputSpec, got {self.output!r}")

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        return {"major": self.major, "output": self.output.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> RoundSchema:
        """Build from :meth:`to_dict` output, raising :class:`SchemaInvalid` on bad input."""
        if not isinstance(data, dict) or set(data) != {"major", "output"}:
            raise SchemaInvalid(f"round schema must have major/output: {data!r}")
        return cls(major=data["major"], output=OutputSpec.from_dict(data["output"]))

    def schema_hash(self) -> str:
        """Return the hex SM3 digest of the canonical JSON contract.

        Uploads carry this hash inside their signed header, binding them to the contract.
        """
        return sm3_digest(canonical.encode(self.to_dict())).hex()

    def check(self, declared: ModelSchema) -> None:
        """Refuse a declared schema that breaks this contract.

        Raises
        ------
        SchemaMajorMismatch
            If the MAJOR versions differ.
        OutputSpecMismatch
            If the output specs differ.
        """
        if declared.version.major != self.major:
            raise SchemaMajorMismatch(
                f"model {declared.model_id!r} declares version {declared.version} but the round "
                f"requires MAJOR {self.major}; MINOR/PATCH may differ, MAJOR may not"
            )
        if declared.output != self.output:
            raise OutputSpecMismatch(
                f"model {declared.model_id!r} declares output {declared.output.to_dict()} but the "
                f"round requires {self.output.to_dict()}"
            )


class SchemaRegistry:
    """Registered model schemas, keyed by model id and version.

    Notes
    -----
    A model id may have several versions; registering the same id and version
    twice with a different output spec is refused (a version is immutable).
    """

    def __init__(self) -> None:
        self._schemas: dict[tuple[str, SemVer], ModelSchema] = {}

    def register(self, schema: ModelSchema) -> None:
        """Register ``schema``; idempotent for an identical schema.

        Raises
        ------
        SchemaInvalid
            If the same model id and version were registered with other content.
        """
        key = (schema.model_id, schema.version)
        existing = self._schemas.get(key)
        if existing is not None and existing != schema:
            raise SchemaInvalid(
                f"model {schema.model_id!r} version {schema.version} is already registered "
                "with a different output spec; publish a new version instead"
            )
        self._schemas[key] = schema

    def versions(self, model_id: str) -> list[SemVer]:
        """Return the registered versions of ``model_id``, oldest first."""
        return sorted(v for (mid, v) in self._schemas if mid == model_id)

    def validate(self, declared: ModelSchema, contract: RoundSchema) -> None:
        """Check that ``declared`` is registered and satisfies ``contract``.

        Raises
        ------
        SchemaUnknown
            If the model id and version are not registered, or were registered differently.
        SchemaMajorMismatch, OutputSpecMismatch
            See :meth:`RoundSchema.check`.
        """
        registered = self._schemas.get((declared.model_id, declared.version))
        if registered is None:
            known = [str(v) for v in self.versions(declared.model_id)]
            raise SchemaUnknown(
                f"model {declared.model_id!r} version {declared.version} is not registered "
                f"(registered versions: {known or 'none'})"
            )
        if registered != declared:
            raise SchemaUnknown(
                f"model {declared.model_id!r} version {declared.version} differs from its "
                "registered schema"
            )
        contract.check(declared)
