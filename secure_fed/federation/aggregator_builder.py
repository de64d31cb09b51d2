"""Build the aggregator of a federation from a run configuration, without torch.

The in-process :class:`~secure_fed.federation.federation.Federation` and a
deployment's aggregator process call :func:`build_aggregator`, so the same
configuration gives the same aggregator wherever it runs: schema registry,
outlier policy, round engine, envelope verifier and the
:class:`~secure_fed.federation.handlers.AggregatorHandler`. The participants'
side (:mod:`secure_fed.federation.builders`) declares the schemas
:func:`participant_schema` names and divides private rows with
:func:`private_parts`. Nothing here imports the learning stack (torch, Opacus),
so the aggregator's process starts without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from crypto.sm import SM2PublicKey
from privacy_ledger.budget.receipts import ReceiptVerifier
from secure_fed.errors import FederationConfigInvalid
from secure_fed.federation.config import FederationConfig, PlannedParticipant
from secure_fed.federation.engine import RoundEngine
from secure_fed.federation.envelope import EnvelopeVerifier
from secure_fed.federation.evidence import EvidenceSource
from secure_fed.federation.handlers import AggregatorHandler
from secure_fed.federation.schema import (
    ModelSchema,
    OutputSpec,
    RoundSchema,
    SchemaRegistry,
    SemVer,
)
from secure_fed.federation.stages import RoundStore
from secure_fed.federation.weighting import DynamicWeighting
from secure_fed.learning.data import TaskData, dirichlet_split
from secure_fed.learning.public_logits import PUBLIC_LOGIT_BOUND
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.mode import SecureAggregator
from secure_fed.secure.scoring.outlier import OutlierConfig, OutlierPolicy

__all__ = [
    "MAX_UPLOAD_BYTES",
    "AggregatorParts",
    "build_aggregator",
    "output_spec",
    "participant_schema",
    "private_parts",
]

#: Size limit of one upload envelope, checked before anything is parsed.
MAX_UPLOAD_BYTES = 64 * 1024 * 1024


def output_spec(num_classes: int) -> OutputSpec:
    """Return the output every upload declares: ``num_classes`` logits, clipped."""
    return OutputSpec(num_classes=num_classes, bound=PUBLIC_LOGIT_BOUND)


def participant_schema(architecture: str, index: int, output: OutputSpec) -> ModelSchema:
    """Return the schema participant ``index`` declares (the aggregator registers it)."""
    return ModelSchema(model_id=architecture, version=SemVer(1, index % 3, 0), output=output)


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
    evidence: EvidenceSource | None = None,
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
        config=OutlierConfig(exclude=config.exclude_outliers, max_flagged=config.max_flagged),
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
        forward=aggregator.forward_upload,
    )
    return AggregatorParts(
        handler=AggregatorHandler(engine=engine, gate=gate),
        engine=engine,
        gate=gate,
        policy=policy,
        registry=registry,
        contract=RoundSchema(major=1, output=output),
    )
