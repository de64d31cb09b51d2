"""What a federation run is configured with, and who takes part.

:class:`FederationConfig` validates every knob of a run (naming the parameter in
its error); :func:`plan_participants` fixes the participants' ids, institution
kinds and architectures before anything is built, so the privacy ledger can
register them and their budgets first (``secure_fed.demo``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from secure_fed.errors import FederationConfigInvalid
from secure_fed.evaluation.attacks import AttackSpec
from secure_fed.federation.distill_settings import DistillSettings
from secure_fed.learning.architectures import ARCHITECTURES
from secure_fed.secure.mode import get_mode, mode_names

if TYPE_CHECKING:
    from secure_fed.learning.logit_adjustment import LogitAdjustment
    from secure_fed.learning.privacy_audit import AuditSettings

__all__ = ["ASSET_ID", "KINDS", "FederationConfig", "PlannedParticipant", "plan_participants"]

#: The data asset every participant's private-training budget is set on.
ASSET_ID = "private-train"
KINDS = ("hospital", "bank")


@dataclass(frozen=True, kw_only=True)
class FederationConfig:
    """Everything a run needs, validated (the parameter is named in every error).

    ``weighting_alpha`` and ``weighting_beta`` are the merit's inverse temperature
    and the evidence EMA of :class:`~secure_fed.federation.weighting.DynamicWeighting`;
    ``evidence_rows`` public rows whose labels the servers hold form each round's
    slice the evidence of correctness is measured on, drawn afresh with a secret key
    (0: no slice, every merit 1; :class:`~secure_fed.federation.evidence.EvidencePool`).

    ``logit_adjustment`` (on by default) keeps minority classes under label skew and
    imbalance: DP-SGD minimises the logit-adjusted loss with each participant's own
    label prior, released by a Gaussian mechanism charged to its budget, and
    distillation the logit-adjusted loss with the published aggregate's class mass
    (Menon et al. 2021; :mod:`secure_fed.learning.logit_adjustment`). ``False``: plain
    cross-entropy and plain distillation, nothing extra charged.

    ``privacy_audit`` (off by default; on in ``secure-fed demo``) is the one-run
    empirical audit of every participant's DP-SGD: its
    :class:`~secure_fed.learning.privacy_audit.AuditSettings` (canaries, guesses,
    confidence), fixed before training. ``None``: no canaries, no audit.
    """

    participants: int = 4
    rounds: int = 5
    alpha: float = 0.5
    epsilon: float = 8.0
    delta: float = 1e-5
    private: bool = True
    attack: AttackSpec | None = None
    mode: str = "plaintext"
    seed: int = 0
    architectures: tuple[str, ...] = ("mlp", "cnn", "transformer", "logreg")
    epochs_per_round: int = 8
    lr: float = 0.3
    batch_size: int = 128
    distill: DistillSettings = field(default_factory=DistillSettings)
    weighting_alpha: float = 1.0
    weighting_beta: float = 0.5
    evidence_rows: int = 100
    sharpen_temperature: float = 0.5
    min_participants: int | None = None
    baseline: bool = True
    round_timeout: float = 600.0
    exclude_outliers: bool = False
    max_flagged: int | None = None
    central_dp: float | None = None
    max_weight: float | None = None
    participant_ids: tuple[str, ...] | None = None
    logit_adjustment: bool = True
    privacy_audit: AuditSettings | None = None

    def __post_init__(self) -> None:
        checks = [
            ("participants", 2 <= self.participants <= 100, "an integer in [2, 100]"),
            ("rounds", 1 <= self.rounds <= 1000, "an integer in [1, 1000]"),
            ("alpha", math.isfinite(self.alpha) and self.alpha > 0, "a number > 0"),
            ("epsilon", math.isfinite(self.epsilon) and self.epsilon > 0, "a number > 0"),
            ("delta", 0 < self.delta < 1, "in (0, 1)"),
            ("epochs_per_round", self.epochs_per_round >= 1, ">= 1"),
            ("lr", math.isfinite(self.lr) and self.lr > 0, "> 0"),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("round_timeout", self.round_timeout > 0, "> 0"),
            ("evidence_rows", 0 <= self.evidence_rows <= 100_000, "an integer in [0, 100000]"),
            (
                "max_flagged",
                self.max_flagged is None
                or (type(self.max_flagged) is int and 0 <= self.max_flagged < self.participants),
                "None or an integer in [0, participants)",
            ),
        ]
        for name, ok, what in checks:
            if not ok:
                raise FederationConfigInvalid(f"{name} must be {what}, got {getattr(self, name)!r}")
        if not self.architectures:
            raise FederationConfigInvalid("architectures must name at least one model")
        unknown = [a for a in self.architectures if a not in ARCHITECTURES]
        if unknown:
            raise FederationConfigInvalid(
                f"architectures {unknown} are not registered; registered: {sorted(ARCHITECTURES)}"
            )
        mode = get_mode(self.mode)  # UnknownMode lists the registered names
        dp = self.central_dp
        if dp is not None and not (math.isfinite(dp) and dp > 0 and mode.central_dp):
            able = [m for m in mode_names() if get_mode(m).central_dp]
            raise FederationConfigInvalid(
                f"central_dp must be a noise multiplier > 0 in a mode that adds it before the "
                f"aggregator sees the aggregate ({able}), got {dp!r} in mode {self.mode!r}"
            )
        if self.attack is not None and self.attack.count >= self.participants:
            raise FederationConfigInvalid(
                f"attack count {self.attack.count} leaves no honest participant"
            )
        quorum = self.min_participants
        if quorum is not None and not 1 <= quorum <= self.participants:
            raise FederationConfigInvalid(
                f"min_participants must be in [1, participants], got {self.min_participants!r}"
            )
        self._check_max_weight()
        ids = self.participant_ids
        if ids is not None and (len(ids) != self.participants or len(set(ids)) != len(ids)):
            raise FederationConfigInvalid(
                f"participant_ids must be {self.participants} distinct ids, got {list(ids)!r}"
            )

    def _check_max_weight(self) -> None:
        w = self.max_weight
        if w is None:
            return
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 < w <= 1:
            raise FederationConfigInvalid(f"max_weight must be in (0, 1], got {w!r}")
        if w * self.quorum() < 1 - 1e-12:
            raise FederationConfigInvalid(
                f"max_weight must be >= 1/min_participants = 1/{self.quorum()} so that every "
                f"round that reaches its quorum can meet it, got {w!r}"
            )
        if w * self.quorum() > 1 + 1e-12:
            raise FederationConfigInvalid(
                f"max_weight must be <= 1/min_participants = 1/{self.quorum()}: the consortium "
                f"policy never lets one publication weigh a participant above an equal share "
                f"of the quorum, got {w!r}"
            )

    def local_adjustment(self) -> LogitAdjustment | None:
        """Return the DP-SGD loss's logit adjustment (``None`` when ``logit_adjustment`` is off)."""
        from secure_fed.learning.logit_adjustment import LogitAdjustment  # torch: participants only

        return LogitAdjustment() if self.logit_adjustment else None

    def distill_settings(self) -> DistillSettings:
        """Return ``distill``, its logit adjustment switched off when ``logit_adjustment`` is."""
        return (
            self.distill if self.logit_adjustment else replace(self.distill, logit_adjustment=0.0)
        )

    def quorum(self) -> int:
        """Minimum participants per round (default: half, rounded up, at least 2)."""
        return self.min_participants or max(2, math.ceil(self.participants / 2))

    def weight_cap(self) -> float:
        """Public cap on one participant's weight (default ``1 / quorum``).

        The default is the smallest cap every completed round can meet: a round
        publishes only with at least ``quorum`` participants, and ``n`` weights
        summing to 1 fit under ``1 / quorum`` whenever ``n >= quorum``. With the
        default quorum (half the participants) it is about twice an equal share.
        """
        return self.max_weight if self.max_weight is not None else 1.0 / self.quorum()


@dataclass(frozen=True)
class PlannedParticipant:
    """Identity of a participant before it is built (for ledger registration)."""

    participant_id: str
    institution: str
    kind: str
    architecture: str
    attacker: bool


def plan_participants(config: FederationConfig) -> list[PlannedParticipant]:
    """Ids, institution kinds and architectures, in a fixed order (attackers last).

    Ids are ``config.participant_ids`` when given (the institution is then the
    id), otherwise ``hospital-1``, ``bank-2``, ...
    """
    attackers = config.attack.count if config.attack is not None else 0
    ids = config.participant_ids
    plan = []
    for k in range(config.participants):
        kind = KINDS[k % len(KINDS)]
        plan.append(
            PlannedParticipant(
                participant_id=ids[k] if ids else f"{kind}-{k + 1}",
                institution=ids[k] if ids else f"{kind.title()} {k + 1}",
                kind=kind,
                architecture=config.architectures[k % len(config.architectures)],
                attacker=k >= config.participants - attackers,
            )
        )
    return plan
