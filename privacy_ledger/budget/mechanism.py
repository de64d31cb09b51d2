"""Mechanism events: what the ledger stores instead of per-round epsilons.

A DP-SGD run is a Poisson-subsampled Gaussian mechanism applied ``steps``
times (Abadi et al. 2016; Mironov 2017, RDP). The ledger records the inputs
of each run and recomputes epsilon over a participant's whole history with
an Opacus accountant; per-round epsilons are never summed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from privacy_ledger.errors import MechanismInvalid

__all__ = ["MechanismEvent"]

_SAMPLERS = ("poisson",)
_MECHANISMS = ("subsampled_gaussian", "gaussian")


@dataclass(frozen=True, kw_only=True)
class MechanismEvent:
    """One planned or spent application of a DP mechanism.

    Parameters
    ----------
    noise_multiplier
        Gaussian noise standard deviation divided by the clipping norm (> 0).
    sample_rate
        Poisson sampling probability per step, in (0, 1]; 1.0 for a
        non-subsampled (participant-level, e.g. central) Gaussian mechanism.
    steps
        Number of mechanism applications (optimizer steps), >= 1.
    delta
        Target delta at which epsilon is reported (0 < delta < 1).
    max_grad_norm
        Clipping norm C (sensitivity), recorded as evidence; > 0.
    mechanism
        ``subsampled_gaussian`` (DP-SGD) or ``gaussian`` (central noise).
    sampler
        Batch sampler; only ``poisson`` is accounted correctly.
    versions
        Library versions used (opacus, torch), recorded as evidence.

    Raises
    ------
    MechanismInvalid
        When a field is out of range (a ``ValueError`` too, naming the field).
    """

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float
    max_grad_norm: float
    mechanism: str = "subsampled_gaussian"
    sampler: str = "poisson"
    versions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.noise_multiplier > 0:
            raise MechanismInvalid(f"noise_multiplier must be > 0, got {self.noise_multiplier!r}")
        if not 0 < self.sample_rate <= 1:
            raise MechanismInvalid(f"sample_rate must be in (0, 1], got {self.sample_rate!r}")
        if self.steps < 1:
            raise MechanismInvalid(f"steps must be >= 1, got {self.steps!r}")
        if not 0 < self.delta < 1:
            raise MechanismInvalid(f"delta must be in (0, 1), got {self.delta!r}")
        if not self.max_grad_norm > 0:
            raise MechanismInvalid(f"max_grad_norm must be > 0, got {self.max_grad_norm!r}")
        if self.mechanism not in _MECHANISMS:
            raise MechanismInvalid(
                f"mechanism must be one of {_MECHANISMS}, got {self.mechanism!r}"
            )
        if self.sampler not in _SAMPLERS:
            raise MechanismInvalid(f"sampler must be one of {_SAMPLERS}, got {self.sampler!r}")
