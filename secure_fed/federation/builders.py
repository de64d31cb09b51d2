"""Build one participant from a run configuration.

The in-process :class:`~secure_fed.federation.federation.Federation` and a
deployment (``secure_fed.deploy.flower``: each party its own process) call
:func:`build_participant`, so the same configuration, seeds and private rows give
the same participant wherever it runs: model (seeded by the participant's position
in :func:`~secure_fed.federation.config.plan_participants`), its declared schema,
DP-SGD trainer, encoder, and the
:class:`~secure_fed.federation.handlers.ParticipantHandler` around them. The
aggregator's side, which needs no torch, is
:mod:`secure_fed.federation.aggregator_builder`.

Nothing here moves a message; the callers do.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from torch import nn

from crypto.sm import SM2PrivateKey
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.evaluation.attacks import make_attack
from secure_fed.federation.aggregator_builder import output_spec, participant_schema
from secure_fed.federation.audit_record import record_audit
from secure_fed.federation.config import ASSET_ID, FederationConfig, PlannedParticipant
from secure_fed.federation.handlers import ParticipantHandler
from secure_fed.federation.participant import LocalTrainer, Participant
from secure_fed.learning.budget_gate import BudgetGate
from secure_fed.learning.models import build_model, check_private_compatible
from secure_fed.learning.privacy_audit import AuditResult, CanaryAudit, make_canaries
from secure_fed.learning.private_training import (
    DPGoal,
    InsecureSeededNoise,
    PrivateTrainer,
    TrainReport,
    train_nonprivate,
)
from secure_fed.learning.public_logits import PUBLIC_LOGIT_BOUND
from secure_fed.secure.mode import UploadEncoder

__all__ = [
    "NonPrivateTrainer",
    "build_participant",
    "make_trainer",
    "participant_audit",
    "participant_seed",
]


class NonPrivateTrainer:
    """Trainer without DP, same interface as ``PrivateTrainer`` (baselines only)."""

    def __init__(
        self,
        *,
        model: nn.Module,
        x: np.ndarray,
        y: np.ndarray,
        epochs: int,
        lr: float,
        batch_size: int,
        seed: int,
    ) -> None:
        self.model, self.x, self.y = model, x, y
        self.epochs, self.lr, self.batch_size, self.seed = epochs, lr, batch_size, seed
        self._calls = 0

    def train_round(self, round_id: str) -> TrainReport:
        """Train ``epochs`` epochs without noise; nothing is charged (no DP claim)."""
        self._calls += 1
        train_nonprivate(
            self.model,
            self.x,
            self.y,
            epochs=self.epochs,
            lr=self.lr,
            batch_size=self.batch_size,
            seed=self.seed * 1000 + self._calls,
        )
        return TrainReport(
            round_id=round_id,
            trained=True,
            refused_reason=None,
            noise_multiplier=0.0,
            sample_rate=1.0,
            steps=0,
            max_grad_norm=0.0,
            epsilon_spent=float("inf"),
        )


def participant_seed(config: FederationConfig, index: int) -> int:
    """Seed of the participant at position ``index`` of the plan (model init, sampling)."""
    return config.seed * 100 + index


def make_trainer(
    config: FederationConfig,
    *,
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    participant_id: str,
    budget: BudgetGate,
    seed: int,
    insecure_noise: InsecureSeededNoise | None = None,
    audit: CanaryAudit | None = None,
) -> LocalTrainer:
    """DP-SGD trainer of one participant (or a non-private one when ``config.private`` is off).

    At least 3 batches per epoch: with a batch as large as the data, Poisson
    sampling gives q = 1 and DP-SGD loses its privacy amplification by
    subsampling. The learning rate follows the batch (linear scaling rule,
    Goyal et al. 2017). The batch follows the private rows ``x``; with an
    ``audit``, the included canaries are added to them inside the trainer,
    which computes the sample rate the ledger is told from the rows it trains on.
    """
    c = config
    batch = max(4, min(c.batch_size, len(x) // 3))
    lr = c.lr * batch / c.batch_size
    if not c.private:
        return NonPrivateTrainer(
            model=model, x=x, y=y, epochs=c.epochs_per_round, lr=lr, batch_size=batch, seed=seed
        )
    return PrivateTrainer(
        model=model,
        x=x,
        y=y,
        goal=DPGoal(epsilon=c.epsilon, delta=c.delta, rounds=c.rounds),
        budget=budget,
        participant_id=participant_id,
        asset_id=ASSET_ID,
        batch_size=batch,
        lr=lr,
        epochs_per_round=c.epochs_per_round,
        seed=seed,
        insecure_noise=insecure_noise,
        logit_adjustment=c.local_adjustment(),
        audit=audit,
    )


def participant_audit(
    config: FederationConfig, *, public_x: np.ndarray, num_classes: int, seed: int | None
) -> CanaryAudit | None:
    """Draw the participant's canaries and coins when ``config.privacy_audit`` is on (else None).

    ``seed`` ``None`` draws them from ``secrets``; an integer (the demo's INSECURE
    ``--reproducible`` only) makes them reproducible. Canaries come from the
    public set's feature ranges only (:func:`~secure_fed.learning.privacy_audit.make_canaries`).
    """
    settings = config.privacy_audit
    if settings is None or not config.private:
        return None
    canaries = make_canaries(
        settings.canaries, public_x=public_x, num_classes=num_classes, seed=seed
    )
    return CanaryAudit(canaries, settings, delta=config.delta)


def build_participant(
    config: FederationConfig,
    *,
    planned: PlannedParticipant,
    index: int,
    x: np.ndarray,
    y: np.ndarray,
    public_x: np.ndarray,
    input_shape: tuple[int, ...],
    num_classes: int,
    budget: BudgetGate,
    encoder: UploadEncoder,
    params: str,
    signing_key: SM2PrivateKey,
    receipts: Callable[[str], bytes] | None = None,
    insecure_noise: bool = False,
    audit: CanaryAudit | None = None,
) -> ParticipantHandler:
    """Build the participant at position ``index`` of the plan, as a message handler.

    ``x, y`` are its private rows; its model is seeded by
    :func:`participant_seed`, so the same configuration gives the same model
    in any process. ``audit`` is the participant's kept canaries and coins (a
    deployed node, rebuilt for every message); without it they are drawn when
    ``config.privacy_audit`` is on (:func:`participant_audit`).

    Raises
    ------
    ConfigurationInvalid
        If the architecture is unknown or not Opacus-compatible, or the trainer
        parameters are invalid.
    """
    seed = participant_seed(config, index)
    model = build_model(
        planned.architecture, input_shape=input_shape, num_classes=num_classes, seed=seed
    )
    check_private_compatible(model)
    attack = None
    if planned.attacker and config.attack is not None:
        attack = make_attack(config.attack.kind, bound=PUBLIC_LOGIT_BOUND, seed=config.seed + index)
    noise = InsecureSeededNoise(seed=seed * 2) if insecure_noise else None
    audit = audit or participant_audit(
        config,
        public_x=public_x,
        num_classes=num_classes,
        seed=seed * 2 + 1 if insecure_noise else None,
    )
    trainer = make_trainer(
        config,
        model=model,
        x=x,
        y=y,
        participant_id=planned.participant_id,
        budget=budget,
        seed=seed,
        insecure_noise=noise,
        audit=audit,
    )
    if (
        audit is not None
        and isinstance(trainer, PrivateTrainer)
        and isinstance(budget, PrivacyLedger)
    ):
        ledger = budget
        trainer.on_audit = lambda result: _record(ledger, result)
    participant = Participant(
        participant_id=planned.participant_id,
        model=model,
        schema=participant_schema(planned.architecture, index, output_spec(num_classes)),
        trainer=trainer,
        public_x=public_x,
        num_samples=len(x),
        encoder=encoder,
        mode=config.mode,
        distill_settings=config.distill_settings(),
        attack=attack,
        seed=seed,
    )
    return ParticipantHandler(
        participant=participant,
        signing_key=signing_key,
        params=params,
        total_rounds=config.rounds,
        receipts=receipts,
        delta=config.delta,
    )


def _record(ledger: PrivacyLedger, result: AuditResult) -> None:
    """Write one audit to the ledger's signed log (``budget.audited``)."""
    record_audit(ledger, result)
