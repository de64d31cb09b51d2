"""The checks against the consortium policy: its own fields, a round's plan, a gatekeeper.

:class:`ConsortiumChecks` is the base of
:class:`~secure_fed.secure.consortium_policy.ConsortiumPolicy` that validates
the document's fields (each refusal a :class:`~secure_fed.errors.PolicyInvalid`
naming the field) and checks a round's
:class:`~secure_fed.secure.release_plan.ReleasePlan` against the policy
(:meth:`ConsortiumChecks.plan_reason`, :meth:`ConsortiumChecks.require_plan`:
:class:`~secure_fed.errors.PlanOutsidePolicy`). The exclusion floor is derived
from the upload's classes (:meth:`ConsortiumChecks.exclusion_floor`), so the
aggregator never picks whom it may leave out. :func:`check_consortium` checks a
gatekeeper's own quorum, participants and upload shape against its pinned policy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from crypto.shares import RING_WEIGHTS
from secure_fed.errors import ModeSetupInvalid, PlanOutsidePolicy, PolicyInvalid
from secure_fed.secure.scoring.outlier import OutlierConfig

if TYPE_CHECKING:  # consortium_policy and release_plan import this module
    from secure_fed.secure.consortium_policy import PolicyPin
    from secure_fed.secure.release_plan import ReleasePlan

__all__ = ["CODEC_WEIGHT_FLOOR", "ConsortiumChecks", "check_consortium"]

#: Smallest publication weight any policy allows: the shares codec's resolution (2^-16).
CODEC_WEIGHT_FLOOR = 2.0**-RING_WEIGHTS.frac_bits
#: Relative slack of the cap comparison (1/quorum is not exact in binary).
_CAP_SLACK = 1e-12


class ConsortiumChecks:
    """The validation and plan check of a consortium policy (the base of ``ConsortiumPolicy``).

    The attributes below are the policy's fields the checks read.
    """

    participant_ids: tuple[str, ...]
    shape: tuple[int, int]
    quorum: int
    max_weight: float | None
    weight_floor: float
    scored: bool
    ranking: bool
    copies: bool
    exclude_quantile: float
    min_moment_rows: int
    min_evidence_rows: int
    max_flagged: int | None
    isolation: int
    version: int
    consortium: str

    def __post_init__(self) -> None:
        ids = self.participant_ids
        if (
            not isinstance(ids, tuple)
            or not ids
            or len(set(ids)) != len(ids)
            or not all(isinstance(p, str) and 0 < len(p) <= 128 for p in ids)
        ):
            raise PolicyInvalid(f"participant_ids must be distinct non-empty ids, got {ids!r}")
        shape = self.shape
        if not (
            isinstance(shape, tuple)
            and len(shape) == 2
            and all(_is_int(s) and s >= 1 for s in shape)
            and shape[1] >= 2
        ):
            raise PolicyInvalid(f"shape must be (N >= 1, C >= 2), got {shape!r}")
        ints = ("quorum", "min_moment_rows", "min_evidence_rows", "isolation", "version")
        for name in ints:
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise PolicyInvalid(
                    f"{name} must be a positive integer, got {getattr(self, name)!r}"
                )
        if not 2 <= self.quorum <= len(ids):
            raise PolicyInvalid(f"quorum must be in [2, {len(ids)}], got {self.quorum}")
        if self.max_weight is None:
            object.__setattr__(self, "max_weight", 1.0 / self.quorum)
        checks = [
            (
                "weight_floor",
                _is_real(self.weight_floor) and CODEC_WEIGHT_FLOOR <= self.weight_floor,
            ),
            ("max_weight", self._cap_ok()),
            (
                "exclude_quantile",
                _is_real(self.exclude_quantile) and 0.5 < self.exclude_quantile < 1,
            ),
            ("isolation", self.isolation <= self.quorum),
            (
                "max_flagged",
                self.max_flagged is None or (_is_int(self.max_flagged) and self.max_flagged >= 0),
            ),
            ("scored", isinstance(self.scored, bool)),
            ("ranking", isinstance(self.ranking, bool) and (self.scored or not self.ranking)),
            ("copies", isinstance(self.copies, bool) and (self.scored or not self.copies)),
            ("consortium", isinstance(self.consortium, str) and 0 < len(self.consortium) <= 128),
        ]
        for name, ok in checks:
            if not ok:
                raise PolicyInvalid(f"{name} is out of range: {getattr(self, name)!r}")

    def cap_limit(self) -> float:
        """Return the largest cap a policy of this quorum may set: ``1 / quorum``."""
        return (1.0 / self.quorum) * (1.0 + _CAP_SLACK)

    @property
    def cap(self) -> float:
        """The publication weight cap (``max_weight`` with its default applied)."""
        return float(self.max_weight or 0.0)  # __post_init__ always sets it

    def _cap_ok(self) -> bool:
        return _is_real(self.max_weight) and self.weight_floor <= self.cap <= self.cap_limit()

    def exclusion_floor(self) -> float:
        """Smallest final score a plan may exclude: the chi-square ``exclude_quantile`` cut."""
        config = OutlierConfig(exclude_quantile=self.exclude_quantile, downweight_quantile=0.51)
        return config.thresholds(self.shape[1] - 1)[1]

    # -- plans ---------------------------------------------------------------------

    def plan_reason(self, plan: ReleasePlan) -> str | None:
        """Say why ``plan`` (a ``ReleasePlan``) lies outside the policy; ``None`` if within."""
        shape = (plan.num_samples, plan.num_classes)
        if shape != self.shape:
            return f"upload shape {shape} is not the policy's {self.shape}"
        if plan.min_participants < self.quorum:
            return f"quorum {plan.min_participants} is below the policy's {self.quorum}"
        if plan.cap > self.cap * (1.0 + _CAP_SLACK):
            return f"weight cap {plan.cap!r} exceeds the policy's {self.cap!r}"
        if plan.weight_floor < self.weight_floor:
            return f"weight floor {plan.weight_floor!r} is below the policy's {self.weight_floor!r}"
        if self.scored and not plan.scored:
            return "the policy requires the scoring steps"
        if self.ranking and plan.scored and not plan.ranking:
            return "the policy requires the ranking step (the robust subset)"
        if self.copies and not plan.copies:
            return "the policy requires near-copy detection"
        if self.max_flagged is not None and (
            plan.max_flagged is None or plan.max_flagged > self.max_flagged
        ):
            return (
                f"outlier budget {plan.max_flagged} (max_flagged) exceeds the policy's "
                f"{self.max_flagged}"
            )
        floor = self.exclusion_floor()
        if not plan.exclude_above >= floor:
            return (
                f"exclusion threshold {plan.exclude_above!r} is below the policy's floor "
                f"{floor!r} (chi-square {self.exclude_quantile!r}, {self.shape[1] - 1} dof)"
            )
        if plan.scored and plan.moment_samples < min(plan.num_samples, self.min_moment_rows):
            return f"{plan.moment_samples} moment rows: the policy requires {self.min_moment_rows}"
        rows = plan.evidence_rows
        if 0 < rows < min(plan.num_samples, self.min_evidence_rows):
            return f"{rows} evidence rows: the policy requires {self.min_evidence_rows}"
        return None

    def require_plan(self, plan: ReleasePlan) -> None:
        """Raise :class:`~secure_fed.errors.PlanOutsidePolicy` unless ``plan`` lies within."""
        reason = self.plan_reason(plan)
        if reason is not None:
            raise PlanOutsidePolicy(
                f"release plan of round {plan.round_id} is outside the consortium policy "
                f"(version {self.version}): {reason}"
            )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_consortium(
    pin: PolicyPin,
    min_participants: int,
    enrolled: frozenset[str] | None,
    shape: tuple[int, int] | None,
) -> frozenset[str]:
    """Check a gatekeeper's own settings against its pinned policy; return the enrolled set.

    Raises
    ------
    ModeSetupInvalid
        If the gatekeeper's quorum, participants or upload shape differ from the policy's.
    """
    policy = pin.policy
    if min_participants != policy.quorum:
        raise ModeSetupInvalid(
            f"{pin.party}: min_participants {min_participants} is not the policy's quorum "
            f"{policy.quorum}"
        )
    ids = frozenset(policy.participant_ids)
    if enrolled is not None and enrolled != ids:
        raise ModeSetupInvalid(f"{pin.party}: enrolled participants are not the policy's")
    if shape is not None and tuple(shape) != policy.shape:
        raise ModeSetupInvalid(f"{pin.party}: upload shape {shape} is not the policy's")
    return ids
