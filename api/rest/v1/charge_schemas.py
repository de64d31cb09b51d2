"""Request and response bodies of the budget-charging routes (:mod:`api.rest.v1.charges`).

A mechanism travels as its accountant inputs (the fields of
:class:`privacy_ledger.MechanismEvent`); floats are JSON numbers, which read
back to the very float the participant planned, so a repeated reservation
compares equal to the first. Epsilons are exact decimals sent as strings.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from privacy_ledger import MechanismEvent

__all__ = [
    "AbortIn",
    "CalibrateIn",
    "CalibrateOut",
    "EpsilonSpentOut",
    "MechanismIn",
    "ReserveIn",
    "REQUEST_ID_PATTERN",
]

#: A reservation request's id, chosen by the caller (random per planned mechanism).
REQUEST_ID_PATTERN = r"^[A-Za-z0-9_-]{16,128}$"
_EPSILON = r"^[0-9]{1,6}(\.[0-9]{1,12})?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MechanismIn(_Strict):
    """The planned mechanism: the inputs of the ledger's accountant."""

    noise_multiplier: float = Field(ge=0.01, le=1e4)
    sample_rate: float = Field(gt=0, le=1)
    steps: int = Field(ge=1, le=10**7)
    delta: float = Field(gt=0, lt=1)
    max_grad_norm: float = Field(gt=0, le=1e9)
    mechanism: str = Field(
        default="subsampled_gaussian", pattern="^(subsampled_gaussian|gaussian)$"
    )
    sampler: str = Field(default="poisson", pattern="^poisson$")
    versions: dict[str, str] = Field(default_factory=dict, max_length=16)

    def event(self) -> MechanismEvent:
        """Return the ledger's :class:`~privacy_ledger.MechanismEvent`."""
        return MechanismEvent(**self.model_dump())

    @classmethod
    def of(cls, event: MechanismEvent) -> MechanismIn:
        """Build from a :class:`~privacy_ledger.MechanismEvent` (the client side)."""
        return cls(
            noise_multiplier=event.noise_multiplier,
            sample_rate=event.sample_rate,
            steps=event.steps,
            delta=event.delta,
            max_grad_norm=event.max_grad_norm,
            mechanism=event.mechanism,
            sampler=event.sampler,
            versions=dict(event.versions),
        )


class ReserveIn(_Strict):
    """Hold budget for one planned mechanism.

    ``request_id`` makes the request safe to repeat: the same id with the same
    round and mechanism answers the reservation made the first time.
    """

    request_id: str = Field(pattern=REQUEST_ID_PATTERN, description="Caller-chosen, random.")
    round_id: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$", max_length=128
    )
    event: MechanismIn
    ttl_seconds: float = Field(default=3600, gt=0, le=7 * 86400)


class AbortIn(_Strict):
    """Release a held reservation (charged instead if anything derived from it was released)."""

    released_anything: bool = False


class EpsilonSpentOut(BaseModel):
    """Epsilon of a budget's committed history (rounded up, exact decimal)."""

    participant_id: str
    asset_id: str
    epsilon_spent: str


class CalibrateIn(_Strict):
    """A DP-SGD plan to calibrate against the budget's history."""

    rounds: int = Field(ge=1, le=10**4)
    steps_per_round: int = Field(ge=1, le=10**7)
    sample_rate: float = Field(gt=0, le=1)
    max_grad_norm: float = Field(gt=0, le=1e9)
    epsilon: str | None = Field(
        default=None, pattern=_EPSILON, description="Extra epsilon the plan may add."
    )


class CalibrateOut(BaseModel):
    """Smallest noise multiplier keeping the history plus the plan within budget."""

    participant_id: str
    asset_id: str
    noise_multiplier: float
