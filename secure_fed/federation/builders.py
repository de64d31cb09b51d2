"""Build one participant, or the aggregator, from a run configuration.

The in-process :class:`~secure_fed.federation.federation.Federation` and a
deployment (``secure_fed.deploy.flower``: each party its own process) call the
same two functions, so the same configuration, seeds and private rows give the
same participant and the same aggregator wherever they run:

* :func:`build_participant` -- model (seeded by the participant's position in
  :func:`~secure_fed.federation.config.plan_participants`), its declared
  schema, DP-SGD trainer, encoder, and the
  :class:`~secure_fed.federation.handlers.ParticipantHandler` around them;
* :func:`build_aggregator` -- schema registry, outlier policy, round engine,
  envelope verifier and the :class:`~secure_fed.federation.handlers.AggregatorHandler`.

Nothing here moves a message; the callers do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from torch import nn

from crypto.sm import SM2PrivateKey, SM2PublicKey
from privacy_ledger.budget.receipts import ReceiptVerifier
from secure_fed.errors import FederationConfigInvalid
from secure_fed.evaluation.attacks import make_attack
from secure_fed.federation.config import ASSET_ID, FederationConfig, PlannedParticipant
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.envelope import EnvelopeVerifier
from secure_fed.federation.handlers import AggregatorHandler, ParticipantHandler
from secure_fed.federation.participant import LocalTrainer, Participant
from secure_fed.federation.schema import (
    ModelSchema,
    OutputSpec,
    RoundSchema,
    SchemaRegistry,
    SemVer,
)
from secure_fed.federation.stages import RoundStore
from secure_fed.federation.weighting import DynamicWeighting
from secure_fed.learning.budget_gate import BudgetGate
from secure_fed.learning.data import TaskData, dirichlet_split
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND
from secure_fed.learning.models import build_model, check_private_compatible
from secure_fed.learning.private_training import (
    DPGoal,
    InsecureSeededNoise,
    PrivateTrainer,
    TrainReport,
    train_nonprivate,
)
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.mode import SecureAggregator, UploadEncoder
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy

__all__ = [
    "MAX_UPLOAD_BYTES",
    "AggregatorParts",
    "NonPrivateTrainer",
    "build_aggregator",
    "build_participant",
    "make_trainer",
    "output_spec",
    "participant_schema",
    "participant_seed",
    "private_parts",
]

#: Size limit of one upload envelope, checked before anything is parsed.
MAX_UPLOAD_BYTES = 64 * 1024 * 1024


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


def output_spec(num_classes: int) -> OutputSpec:
    """Return the output every upload declares: ``num_classes`` logits, clipped."""
    return OutputSpec(num_classes=num_classes, bound=PUBLIC_LOGIT_BOUND)


def participant_schema(architecture: str, index: int, output: OutputSpec) -> ModelSchema:
    """Return the schema participant ``index`` declares (the aggregator registers it)."""
    return ModelSchema(model_id=architecture, version=SemVer(1, index % 3, 0), output=output)


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
) -> LocalTrainer:
    """DP-SGD trainer of one participant (or a non-private one when ``config.private`` is off).

    At least 3 batches per epoch: with a batch as large as the data, Poisson
    sampling gives q = 1 and DP-SGD loses its privacy amplification by
    subsampling. The learning rate follows the batch (linear scaling rule,
    Goyal et al. 2017).
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
    )


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
) -> ParticipantHandler:
    """Build the participant at position ``index`` of the plan, as a message handler.

    ``x, y`` are its private rows; its model is seeded by
    :func:`participant_seed`, so the same configuration gives the same model
    in any process.

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
    trainer = make_trainer(
        config,
        model=model,
        x=x,
        y=y,
        participant_id=planned.participant_id,
        budget=budget,
        seed=seed,
        insecure_noise=noise,
    )
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


def private_parts(task: TaskData, config: FederationConfig) -> list[np.ndarray]:
    """Row indices of every participant's private data, in plan order.

    One pool is divided by Dirichlet label skew; own tables are kept as given.

    Raises
    ------
    FederationConfigInvalid
        If the task has per-participant tables and ``config.participants`` differs.
    """
    if task.parts is None:
        return dirichlet_split(
            task.private_y,
            parts=config.participants,
            alpha=config.alpha,
            seed=config.seed,
            min_size=16,
        )
    if len(task.parts) != config.participants:
        raise FederationConfigInvalid(
            f"participants must be {len(task.parts)}, the number of participant tables, "
            f"got {config.participants}"
        )
    return list(task.parts)


@dataclass(frozen=True)
class AggregatorParts:
    """What :func:`build_aggregator` builds (the handler and the pieces callers inspect)."""

    handler: AggregatorHandler
    engine: RoundEngine
    gate: EnvelopeVerifier
    policy: OutlierPolicy
    registry: SchemaRegistry
    contract: RoundSchema


def build_aggregator(
    config: FederationConfig,
    *,
    plan: Sequence[PlannedParticipant],
    registered_rows: Mapping[str, int],
    num_classes: int,
    aggregator: SecureAggregator,
    params: str,
    participant_keys: Mapping[str, SM2PublicKey],
    store: RoundStore,
    audit: AuditSink | None,
    receipt_key: SM2PublicKey | None = None,
    evidence: EvidenceSlice | None = None,
    clock: Callable[[], float] = time.time,
) -> AggregatorParts:
    """Build the aggregator of a federation: registry, policy, engine, envelope gate, handler.

    Every planned participant's schema is registered, and its base share is
    ``registered_rows`` (the row counts the operator assigned, never an
    upload's own claim). With ``receipt_key`` an upload is accepted only with
    the ledger's signed receipt of the sender's committed charge.

    Raises
    ------
    ConfigurationInvalid
        If a schema, the weighting or the outlier policy is invalid.
    """
    output = output_spec(num_classes)
    registry = SchemaRegistry()
    for index, planned in enumerate(plan):
        registry.register(participant_schema(planned.architecture, index, output))
    policy = OutlierPolicy(
        dof=num_classes - 1,
        min_keep=config.quorum(),
        config=OutlierConfig(exclude=config.exclude_outliers),
    )
    engine = RoundEngine(
        store=store,
        aggregator=aggregator,
        mode=config.mode,
        registry=registry,
        weighting=DynamicWeighting(alpha=config.weighting_alpha, beta=config.weighting_beta),
        outlier_filter=policy,
        audit=audit,
        sharpen_temperature=config.sharpen_temperature,
        clock=clock,
        evidence=evidence,
    )
    engine.weighting.registered = {
        p.participant_id: registered_rows[p.participant_id] for p in plan
    }
    gate = EnvelopeVerifier(
        keys=participant_keys,
        submit=engine.submit,
        params=params,
        max_bytes=MAX_UPLOAD_BYTES,
        audit=audit,
        receipts=None
        if receipt_key is None
        else ReceiptVerifier(public_key=receipt_key, clock=clock),
    )
    return AggregatorParts(
        handler=AggregatorHandler(engine=engine, gate=gate),
        engine=engine,
        gate=gate,
        policy=policy,
        registry=registry,
        contract=RoundSchema(major=1, output=output),
    )
