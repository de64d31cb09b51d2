"""In-process orchestration of a heterogeneous federated-distillation run.

Wires participants (different architectures, each with a DP-SGD trainer on a
Dirichlet(alpha) share of the private data), an aggregator
(:class:`~secure_fed.federation.engine.RoundEngine` over a registered aggregation
mode) and a budget gate, and runs rounds in the order of docs/federation.md,
section 1: budget-checked DP-SGD, predictions on ``D_pub``, upload bytes,
validation and aggregation, publication bytes, distillation (FedMD, Li and
Wang 2019; FedDF, Lin et al. 2020). This module holds the only round loop
(:meth:`Federation.run_round`); each party is a message handler
(:mod:`secure_fed.federation.handlers`) and the loop only moves bytes between
them, so a deployment can run the same handlers in separate processes.

Every participant also has a *local-only twin*: the same architecture and
initial weights, trained by the same DP-SGD goal on the same private rows,
never federated. It is the baseline of the per-round table; its budget is an
evaluation-only :class:`~secure_fed.learning.budget_gate.InMemoryBudgetGate`, never the
real ledger.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from torch import nn

from crypto.sm import SM2PrivateKey
from privacy_ledger.budget.receipts import ReceiptIssuer
from privacy_ledger.budget.service import PrivacyLedger
from secure_fed.errors import SecureFedError, TooFewParticipants
from secure_fed.federation.aggregator_builder import (
    MAX_UPLOAD_BYTES,
    build_aggregator,
    output_spec,
    private_parts,
)
from secure_fed.federation.builders import build_participant, make_trainer, participant_seed
from secure_fed.federation.config import (
    ASSET_ID,
    FederationConfig,
    PlannedParticipant,
    plan_participants,
)
from secure_fed.federation.decisions import DecisionRecorder
from secure_fed.federation.envelope import EnvelopeVerifier
from secure_fed.federation.evidence import EvidencePool
from secure_fed.federation.handlers import ParticipantHandler
from secure_fed.federation.observer import (
    ObservedAggregator,
    ObservedEncoder,
    StageEvent,
    StageObserver,
)
from secure_fed.federation.participant import (
    LocalTrainer,
    Participant,
    public_set_digest,
    upload_notice,
)
from secure_fed.federation.stages import RoundConfig, RoundStore
from secure_fed.learning.budget_gate import BudgetGate, InMemoryBudgetGate
from secure_fed.learning.data import TaskData
from secure_fed.learning.distill import PUBLIC_LOGIT_BOUND
from secure_fed.learning.metrics import METRIC_NAMES, Scores, evaluate_scores
from secure_fed.learning.private_training import (
    InsecureSeededNoise,
)
from secure_fed.secure.audit import AuditSink, MemoryAuditSink
from secure_fed.secure.consortium_policy import ConsortiumPolicy, SignedPolicy
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.mode import UploadEncoder
from secure_fed.secure.parties.central_dp import CentralDP
from secure_fed.secure.parties.helper import HelperParty
from secure_fed.secure.parties.key_authority import KeyAuthority
from secure_fed.secure.scoring.mahalanobis import ScoringConfig

__all__ = ["Federation", "ParticipantRound", "RoundResult"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ParticipantRound:
    """One participant's row of the per-round table.

    ``decision`` and ``factor`` are the outlier policy's; ``base_share``,
    ``merit``, ``copies``, ``applied_factor`` and ``max_weight`` are the weight
    terms the engine applied (None when nothing was weighed: an excluded
    upload, an aborted round), ``weight`` the published weight. The thresholds
    and ``smoothed_score`` are the policy's (None for a filter without them).
    """

    participant_id: str
    architecture: str
    attacker: bool
    accuracy_federated: float
    accuracy_local: float | None
    epsilon_spent: float | None
    weight: float | None
    score: float | None
    private_training: str
    decision: str | None = None
    factor: float | None = None
    upload: str = "none"
    base_share: float | None = None
    merit: float | None = None
    copies: int | None = None
    applied_factor: float | None = None
    max_weight: float | None = None
    downweight_threshold: float | None = None
    exclude_threshold: float | None = None
    smoothed_score: float | None = None
    balanced_accuracy_federated: float | None = None
    macro_f1_federated: float | None = None
    roc_auc_federated: float | None = None
    balanced_accuracy_local: float | None = None
    macro_f1_local: float | None = None
    roc_auc_local: float | None = None

    def metric(self, name: str, *, local: bool) -> float | None:
        """Metric ``name`` (one of ``METRIC_NAMES``) of the federated or local-only model."""
        value = getattr(self, f"{name}_{'local' if local else 'federated'}")
        return None if value is None else float(value)


@dataclass(frozen=True, kw_only=True)
class RoundResult:
    """Outcome of one round."""

    round_id: int
    stage: str
    reason: str | None
    rows: tuple[ParticipantRound, ...]
    seconds: float

    def mean_accuracy(self, *, honest_only: bool = True) -> tuple[float, float | None]:
        """Mean (federated, local-only) accuracy over (honest) participants."""
        rows = [r for r in self.rows if not (honest_only and r.attacker)]
        fed = float(np.mean([r.accuracy_federated for r in rows]))
        local = [r.accuracy_local for r in rows if r.accuracy_local is not None]
        return fed, (float(np.mean(local)) if local else None)

    def mean_metrics(self, *, honest_only: bool = True) -> dict[str, dict[str, float | None]]:
        """Mean of every metric over (honest) participants: ``{name: {federated, local_only}}``.

        A mean is ``None`` when no participant has the metric (ROC AUC of a
        multi-class task, local-only figures without twins).
        """
        rows = [r for r in self.rows if not (honest_only and r.attacker)]
        means: dict[str, dict[str, float | None]] = {}
        for name in METRIC_NAMES:
            means[name] = {
                side: _mean([r.metric(name, local=local) for r in rows])
                for side, local in (("federated", False), ("local_only", True))
            }
        return means


@dataclass
class _Member:
    handler: ParticipantHandler
    architecture: str
    attacker: bool
    twin: LocalTrainer | None
    twin_model: nn.Module | None
    epsilon: float | None = None
    status: str = "pending"
    upload: str = "none"

    @property
    def participant(self) -> Participant:
        return self.handler.participant


class Federation:
    """A whole federation in one process: participants, aggregator, budget.

    Parameters
    ----------
    config
        The run configuration.
    task
        Public / private / test data (``secure_fed.learning.data.load_task``).
    budget
        The real budget gate (a ``PrivacyLedger``); participants must already
        be registered in it with their budgets (see :func:`plan_participants`).
    store
        Round-state persistence of the aggregator.
    clock
        Unix-time source for round deadlines.
    on_stage
        Optional observer called with a :class:`~secure_fed.federation.observer.StageEvent`
        when each stage of a round starts (progress displays); names only, no data.
    insecure_noise
        ``True`` seeds every DP-SGD noise generator from the run seed
        (:class:`~secure_fed.learning.private_training.InsecureSeededNoise`): identical
        numbers run after run, no DP guarantee, recorded in every ledger event.
        It also derives the evidence slices' key from the seed
        (:meth:`~secure_fed.federation.evidence.EvidencePool.insecure_from_seed`): a
        participant who knows the seed can predict every round's slice.
        Demos and tests only; ``False`` by default.
    """

    def __init__(
        self,
        *,
        config: FederationConfig,
        task: TaskData,
        budget: BudgetGate,
        store: RoundStore,
        clock: Callable[[], float] = time.time,
        audit: AuditSink | None = None,
        on_stage: StageObserver | None = None,
        insecure_noise: bool = False,
    ) -> None:
        # Each round's labeled slice of the public set (the servers keep the labels), drawn
        # with a secret key a participant cannot know; predictable only when reproducible.
        self.evidence = (
            EvidencePool.insecure_from_seed(task, rows=config.evidence_rows, seed=config.seed)
            if insecure_noise
            else EvidencePool.from_task(task, rows=config.evidence_rows)
        )
        self.config, self.task, self.budget, self.clock = config, task, budget, clock
        self.on_stage, self.insecure_noise = on_stage, insecure_noise
        shape = (len(task.public_x), task.num_classes)
        # Secure modes: key authority, helper and enrolment (secure_fed.secure.deployment);
        # every mode scores by robust pooled Mahalanobis and decides by OutlierPolicy,
        # whose factors the engine multiplies into the published weights and audits.
        self.audit = audit if audit is not None else MemoryAuditSink()
        plan = plan_participants(config)
        scoring = ScoringConfig(min_subset=config.quorum())
        central_dp = None
        if config.central_dp is not None:  # the key authority adds it, charged per contributor
            central_dp = CentralDP(
                noise_multiplier=config.central_dp,
                delta=config.delta,
                asset_id=ASSET_ID,
                bound=PUBLIC_LOGIT_BOUND,
                max_weight=config.weight_cap(),
            )
        signing_keys = {p.participant_id: SM2PrivateKey.generate() for p in plan}
        # The consortium's policy, signed by every participant's envelope key and pinned
        # by both gatekeepers: no round's plan may open more (docs/audit/threat-model.md).
        self.consortium = SignedPolicy.sign(
            ConsortiumPolicy(
                participant_ids=tuple(signing_keys),
                shape=shape,
                quorum=config.quorum(),
                max_weight=config.weight_cap(),
                max_flagged=config.max_flagged,
            ),
            signing_keys,
        )
        self.deployment = SecureDeployment.create(
            mode=config.mode,
            shape=shape,
            participant_ids=[p.participant_id for p in plan],
            min_participants=config.quorum(),
            audit=self.audit,
            scoring=scoring,
            central_dp=central_dp,
            budget=budget if central_dp is not None else None,
            policy=self.consortium,
            participant_keys={p: k.public_key for p, k in signing_keys.items()},
        )
        aggregator = self.deployment.aggregator(bound=PUBLIC_LOGIT_BOUND)
        if on_stage is not None:
            aggregator = ObservedAggregator(aggregator, notify=self._stage)
        # With a privacy ledger, the aggregator accepts an upload only with the ledger's
        # signed receipt of the sender's committed charge for the round.
        self.receipts: ReceiptIssuer | None = None
        if config.private and isinstance(budget, PrivacyLedger):
            self.receipts = ReceiptIssuer(ledger=budget, key=SM2PrivateKey.generate(), clock=clock)
        parts = private_parts(task, config)
        # the engine's audit events, with a copy of the weight terms for the round tables
        self.decisions = DecisionRecorder(self.audit)
        # base shares: the row counts the operator assigned, never an upload's own claim
        rows = {p.participant_id: len(idx) for p, idx in zip(plan, parts, strict=True)}
        built = build_aggregator(
            config,
            plan=plan,
            registered_rows=rows,
            num_classes=task.num_classes,
            aggregator=aggregator,
            params=self.deployment.params,
            participant_keys={p: k.public_key for p, k in signing_keys.items()},
            store=store,
            audit=self.decisions,
            receipt_key=None if self.receipts is None else self.receipts.public_key,
            evidence=self.evidence,
            clock=clock,
        )
        self.output = output_spec(task.num_classes)
        self.contract, self.registry, self.policy = built.contract, built.registry, built.policy
        self.engine, self.gate, self.aggregator = built.engine, built.gate, built.handler
        # the ckks verifier checks every forwarded upload with its own envelope gate
        self.deployment.link_upload_verifier(
            EnvelopeVerifier(
                keys={p: k.public_key for p, k in signing_keys.items()},
                submit=self.engine.submit,
                params=self.deployment.params,
                max_bytes=MAX_UPLOAD_BYTES,
            ).open
        )
        self.public_sm3 = public_set_digest(task.public_x)
        # each participant notices its upload to the round's opening gatekeeper first
        self._notice_keys, self._noticed = signing_keys, _notice_gatekeeper(self.deployment)
        self._baseline_gate = InMemoryBudgetGate(epsilon=config.epsilon, delta=config.delta)
        self.members = [
            self._build(planned, idx, k, signing_keys[planned.participant_id])
            for k, (planned, idx) in enumerate(zip(plan, parts, strict=True))
        ]
        self.round_id = 0

    def _trainer(
        self, model: nn.Module, x: np.ndarray, y: np.ndarray, pid: str, gate: BudgetGate, seed: int
    ) -> LocalTrainer:
        noise = None
        if self.insecure_noise:
            noise = InsecureSeededNoise(seed=seed * 2 + (gate is self._baseline_gate))
        return make_trainer(
            self.config,
            model=model,
            x=x,
            y=y,
            participant_id=pid,
            budget=gate,
            seed=seed,
            insecure_noise=noise,
        )

    def _build(
        self, planned: PlannedParticipant, idx: np.ndarray, k: int, key: SM2PrivateKey
    ) -> _Member:
        c, t = self.config, self.task
        x, y = t.private_x[idx], t.private_y[idx]
        handler = build_participant(
            c,
            planned=planned,
            index=k,
            x=x,
            y=y,
            public_x=t.public_x,
            input_shape=t.input_shape,
            num_classes=t.num_classes,
            budget=self.budget,
            encoder=self._encoder(planned.participant_id),
            params=self.deployment.params,
            signing_key=key,
            receipts=self._receipt_source(planned.participant_id),
            insecure_noise=self.insecure_noise,
        )
        twin_model = copy.deepcopy(handler.participant.model) if c.baseline else None
        twin = None
        if twin_model is not None:
            seed = participant_seed(c, k)
            twin = self._trainer(
                twin_model, x, y, planned.participant_id, self._baseline_gate, seed
            )
        return _Member(handler, planned.architecture, planned.attacker, twin, twin_model)

    def _stage(self, stage: str, participant_id: str | None = None) -> None:
        if self.on_stage is not None:
            self.on_stage(StageEvent(self.round_id, stage, participant_id))

    def _encoder(self, pid: str) -> UploadEncoder:
        encoder = self.deployment.encoder(pid, bound=PUBLIC_LOGIT_BOUND)
        if self.on_stage is None:
            return encoder
        return ObservedEncoder(encoder, participant_id=pid, notify=self._stage)

    def _receipt_source(self, pid: str) -> Callable[[str], bytes] | None:
        issuer = self.receipts
        if issuer is None:
            return None
        return lambda label: issuer.issue(participant_id=pid, asset_id=ASSET_ID, round_id=label)

    def round_config(self, round_id: int) -> RoundConfig:
        """Return the config the aggregator opens round ``round_id`` with."""
        return RoundConfig(
            round_id=round_id,
            public_set_id=f"{self.task.name}-public",
            public_set_sm3=self.public_sm3,
            schema=self.contract,
            mode=self.config.mode,
            num_public=len(self.task.public_x),
            min_participants=self.config.quorum(),
            deadline=self.clock() + self.config.round_timeout,
            projection_seed=self.config.seed,
            max_upload_bytes=64 * 1024 * 1024,
            max_weight=self.config.weight_cap(),
        )

    def _participant_round(self, member: _Member, config: RoundConfig) -> bytes | None:
        """Run the participant's round (train, upload envelope); None if it sent no upload."""
        self._stage("training", member.participant.participant_id)
        try:
            return member.handler.handle_round(config)
        except SecureFedError as exc:
            _log.warning("participant %s sent no upload: %s", member.handler, exc)
            member.upload = f"none: {exc}"
            return None
        finally:
            self._record_training(member, config.round_id)

    def _record_training(self, member: _Member, round_id: int) -> None:
        """Table status of the participant's private training; trains its local-only twin."""
        p, report = member.participant, member.handler.report
        if report is not None and report.trained:
            member.status = "trained"
            member.epsilon = report.epsilon_spent if self.config.private else None
        elif p.stop_reason is not None:
            member.status = f"stopped: {p.stop_reason}"
        if member.twin is not None:
            self._stage("baseline", p.participant_id)
            twin_report = member.twin.train_round(f"r{round_id}")
            if not twin_report.trained:
                member.twin = None  # the local-only twin's budget is spent as well

    def run_round(self) -> RoundResult:
        """Run the next round end to end and return its table rows.

        The loop only moves messages: the round config to every participant
        handler, each upload envelope to the aggregator handler, the
        publication back to every participant.
        """
        start = self.clock()
        self.round_id += 1
        rid = self.round_id
        config = self.aggregator.open_round(self.round_config(rid))
        for member in self.members:
            member.upload = "none"
            envelope = self._participant_round(member, config)
            if envelope is None:
                continue
            self._notice(member, envelope)
            self._stage("verifying", member.participant.participant_id)
            try:
                self.aggregator.handle_upload(envelope, round_id=rid)
            except SecureFedError as exc:
                _log.warning("upload of %s refused: %s", member.handler, exc)
                member.upload = f"refused: {exc}"
            else:
                member.upload = "accepted"
        reason = None
        try:
            publication = self.aggregator.finish_round(rid)
        except TooFewParticipants as exc:
            reason = exc.message
        except SecureFedError as exc:  # a party refused (scoring, plan...): this round only
            reason = self._abort(rid, exc)
        else:
            for member in self.members:
                self._stage("distilling", member.participant.participant_id)
                member.handler.handle_publication(publication)
        self._stage("evaluating")
        return self._result(rid, reason, self.clock() - start)

    def _notice(self, member: _Member, envelope: bytes) -> None:
        """Send the participant's signed upload notice to the round's gatekeeper, if any.

        A refused notice is logged; the participant still uploads (it only loses the
        guarantee that no roster of the round leaves it out).
        """
        if self._noticed is None:
            return
        party, accept = self._noticed
        pid = member.participant.participant_id
        try:
            notice = upload_notice(
                envelope,
                key=self._notice_keys[pid],
                party=party,
                receipt_required=self.receipts is not None,
            )
            if notice is not None:
                accept(notice)
        except SecureFedError as exc:
            _log.warning("upload notice of %s refused: %s", pid, exc)

    def _abort(self, rid: int, exc: SecureFedError) -> str:
        """Abort round ``rid`` after a party's refusal; audit it (``round.aborted``)."""
        reason = f"{exc.code}: {exc.message}"
        stage = self.engine.state(rid).stage
        if stage.value not in ("published", "aborted"):
            self.engine.abort(rid, reason=reason)
        self.audit.record("round.aborted", {"round": rid, "stage": stage.value, "reason": reason})
        _log.warning("round %d aborted (was %s): %s", rid, stage.value, reason)
        return reason

    def _result(self, rid: int, reason: str | None, seconds: float) -> RoundResult:
        state = self.engine.state(rid)
        terms = self.decisions.of_round(rid) if state.stage.value == "published" else {}
        t = self.task
        rows = []
        for m in self.members:
            pid = m.participant.participant_id
            decision = state.decisions.get(pid, {})
            applied = terms.get(pid, {})
            fed = evaluate_scores(m.participant.model, t.test_x, t.test_y)
            local = (
                evaluate_scores(m.twin_model, t.test_x, t.test_y)
                if m.twin_model is not None
                else None
            )
            rows.append(
                ParticipantRound(
                    participant_id=pid,
                    architecture=m.architecture,
                    attacker=m.attacker,
                    accuracy_federated=fed.accuracy,
                    accuracy_local=None if local is None else local.accuracy,
                    **_metric_fields(fed, local),
                    epsilon_spent=m.epsilon,
                    weight=state.weights.get(pid),
                    score=state.scores.get(pid),
                    private_training=m.status,
                    decision=_optional_str(decision.get("action")),
                    factor=_optional_float(decision.get("factor")),
                    upload=m.upload,
                    base_share=_optional_float(applied.get("base_share")),
                    merit=_optional_float(applied.get("merit")),
                    copies=_optional_int(applied.get("copies")),
                    applied_factor=_optional_float(applied.get("applied_factor")),
                    max_weight=_optional_float(applied.get("max_weight")),
                    downweight_threshold=_optional_float(decision.get("downweight_threshold")),
                    exclude_threshold=_optional_float(decision.get("exclude_threshold")),
                    smoothed_score=_optional_float(decision.get("smoothed")),
                )
            )
        return RoundResult(
            round_id=rid, stage=state.stage.value, reason=reason, rows=tuple(rows), seconds=seconds
        )

    def run(self, on_round: Callable[[RoundResult], None] | None = None) -> list[RoundResult]:
        """Run ``config.rounds`` rounds, calling ``on_round`` after each."""
        results = []
        for _ in range(self.config.rounds):
            result = self.run_round()
            results.append(result)
            if on_round is not None:
                on_round(result)
        return results


def _notice_gatekeeper(deployment: object) -> tuple[str, Callable[[bytes], bytes]] | None:
    """Return the gatekeeper that opens the mode's values (its name and notice intake)."""
    helper = getattr(deployment, "helper", None)
    if isinstance(helper, HelperParty):
        return "helper", helper.accept_notice
    authority = getattr(deployment, "authority", None)
    if isinstance(authority, KeyAuthority) and authority.keys is not None:
        return "key_authority", authority.accept_notice
    return None


def _metric_fields(fed: Scores, local: Scores | None) -> dict[str, float | None]:
    """Return the row's metric fields besides accuracy, for the federated model and its twin."""
    fields: dict[str, float | None] = {}
    for name in METRIC_NAMES[1:]:
        fields[f"{name}_federated"] = getattr(fed, name)
        fields[f"{name}_local"] = None if local is None else getattr(local, name)
    return fields


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def _optional_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
