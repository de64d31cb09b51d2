"""The aggregator's round engine: drives :class:`~secure_fed.federation.stages.Stage` transitions.

The server side of a round (docs/federation.md, sections 1 and 2): open a
round, validate and collect upload bytes (size, framing, round, replay,
schema, mode, payload), close on deadline or demand (dropouts: the round
completes with whoever uploaded if at least ``min_participants`` did, else it
aborts), score every upload and let the outlier filter decide an action and a
weight factor per participant, aggregate with the dynamic weights times those
factors, the evidence of correctness and the near-duplicate counts
(:meth:`~secure_fed.federation.weighting.DynamicWeighting.weigh`), and
publish soft-label bytes. The audit log gets one ``outlier.decision`` event per
participant with the decision and the weight that was actually applied.
Every transition is persisted before it is reported, so
:meth:`RoundEngine.recover` can resume or abort after a crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

import numpy as np

from crypto.sm.sm3 import sm3_digest
from secure_fed.errors import (
    RoundConfigInvalid,
    RoundNotFound,
    RoundOutOfOrder,
    SchemaInvalid,
    StaleRound,
    TooFewParticipants,
    UploadBindingInvalid,
    UploadDuplicate,
    UploadLate,
    UploadMalformed,
    UploadPayloadReused,
    UploadPayloadStale,
    UploadReplayed,
)
from secure_fed.federation.decisions import KeepAll, OutlierFilter, decide, decision_events
from secure_fed.federation.evidence import EvidenceSource
from secure_fed.federation.messages import (
    Publication,
    decode_upload,
    encode_publication,
    payload_ids,
)
from secure_fed.federation.schema import SchemaRegistry
from secure_fed.federation.stages import (
    RoundConfig,
    RoundState,
    RoundStore,
    Stage,
    UploadRecord,
    advance,
)
from secure_fed.federation.weighting import DynamicWeighting, WeightTerms, sharpen_logits
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.mode import SecureAggregator, UploadHandle
from secure_fed.secure.release_plan import MIN_EVIDENCE_ROWS, ReleasePlan, exclusion_floor
from secure_fed.secure.release_plan_core import flag_budget
from secure_fed.secure.scoring.outlier import Decision, excluded_ids

__all__ = ["RoundEngine"]

_log = logging.getLogger(__name__)


def _usable_slice(evidence: EvidenceSource | None, shape: tuple[int, int]) -> EvidenceSource | None:
    """Return the slice source if a gatekeeper would accept its slices; warn and drop it if not.

    An evidence scalar must average over at least ``min(N, MIN_EVIDENCE_ROWS)``
    rows; a smaller slice would make the secure modes' gatekeepers refuse every
    round's plan, so no mode uses it (every merit is then 1).
    """
    needed = min(shape[0], MIN_EVIDENCE_ROWS)
    if evidence is not None and evidence.size < needed:
        _log.warning(
            "labeled slice of %d rows is below the %d an evidence scalar averages over: "
            "weights use no evidence",
            evidence.size,
            needed,
        )
        return None
    return evidence


class RoundEngine:
    """Drive rounds for one aggregator.

    Parameters
    ----------
    store
        Round-state persistence.
    aggregator
        Server side of the aggregation mode.
    mode
        The mode name uploads must declare.
    registry
        Known model schemas.
    weighting
        Dynamic weighting (its EMA history is restored by :meth:`recover`).
    outlier_filter
        Decisions and weight factors from scores (default: keep all).
    audit
        Sink of the ``outlier.decision`` events (None: no audit trail).
    sharpen_temperature
        DS-FL entropy reduction of the published aggregate; 1.0 disables it.
    clock
        Unix-time source (injectable for deadline tests).
    evidence
        Where each round's labeled slice of the public set comes from (an
        :class:`~secure_fed.federation.evidence.EvidencePool` draws a fresh secret
        slice per round; a fixed
        :class:`~secure_fed.secure.scoring.evidence.EvidenceSlice` serves every
        round). The weights use its per-participant evidence of correctness
        (None: no evidence, every merit 1). The round's slice goes into its
        release plan, fixed before any upload, so the secure modes' gatekeepers
        open one evidence scalar per participant with exactly its mask; slices of
        fewer than ``min(N, MIN_EVIDENCE_ROWS)`` rows are dropped with a warning.
    """

    def __init__(
        self,
        *,
        store: RoundStore,
        aggregator: SecureAggregator,
        mode: str,
        registry: SchemaRegistry,
        weighting: DynamicWeighting | None = None,
        outlier_filter: OutlierFilter | None = None,
        audit: AuditSink | None = None,
        sharpen_temperature: float = 1.0,
        clock: Callable[[], float] = time.time,
        evidence: EvidenceSource | None = None,
    ) -> None:
        self.store, self.aggregator, self.mode, self.registry = store, aggregator, mode, registry
        self.weighting = weighting if weighting is not None else DynamicWeighting()
        self.outlier_filter = outlier_filter if outlier_filter is not None else KeepAll()
        self.audit = audit
        sharpen_logits(np.zeros((1, 2)), temperature=sharpen_temperature)  # validates
        self.sharpen_temperature = sharpen_temperature
        self.clock = clock
        self.evidence = _usable_slice(evidence, aggregator.shape)
        self._states: dict[int, RoundState] = {}
        self._handles: dict[int, dict[str, UploadHandle]] = {}

    # -- bookkeeping ----------------------------------------------------------------

    def state(self, round_id: int) -> RoundState:
        """Return the live state of ``round_id`` (loading it from the store if needed).

        Raises
        ------
        StaleRound, RoundNotFound
            If the round is older than the newest one, or unknown.
        """
        if round_id in self._states:
            return self._states[round_id]
        loaded = self.store.load(round_id)
        if loaded is None:
            last = self.store.last_round_id()
            if last is not None and round_id < last:
                raise StaleRound(f"round {round_id} is older than the current round {last}")
            raise RoundNotFound(f"round {round_id} was never opened")
        self._states[round_id] = loaded
        return loaded

    def _move(self, state: RoundState, target: Stage, reason: str | None = None) -> None:
        advance(state, target, at=self.clock(), reason=reason)
        self.store.save(state)
        _log.info("round %d -> %s", state.round_id, target.value)

    def _require(self, state: RoundState, stage: Stage, step: str) -> None:
        if state.stage is not stage:
            raise RoundOutOfOrder(
                f"round {state.round_id}: {step} needs stage {stage.value!r}, "
                f"but the round is {state.stage.value!r}"
            )

    # -- steps ----------------------------------------------------------------------

    def open(self, config: RoundConfig) -> RoundState:
        """Open a round (stage ``open``); round ids must strictly increase.

        Raises
        ------
        StaleRound
            If ``config.round_id`` is not above every stored round.
        RoundConfigInvalid
            If the config names another mode.
        """
        last = self.store.last_round_id()
        if last is not None and config.round_id <= last:
            raise StaleRound(f"round {config.round_id} is not newer than round {last}")
        if config.mode != self.mode:
            raise RoundConfigInvalid(f"mode {config.mode!r} is not the engine's {self.mode!r}")
        self.aggregator.begin_round(self._release_plan(config))  # fixed before any upload
        state = RoundState(config=config, weighting_history=dict(self.weighting.history))
        state.log.append((Stage.OPEN.value, self.clock()))
        self.store.save(state)
        self._states[config.round_id] = state
        self._handles[config.round_id] = {}
        return state

    def _release_plan(self, config: RoundConfig) -> ReleasePlan:
        """Return the round's release plan: what may be opened, over whom, with which weights."""
        return ReleasePlan.for_round(
            round_id=config.round_id,
            min_participants=config.min_participants,
            shape=self.aggregator.shape,
            scoring=self.aggregator.scoring,
            max_weight=config.max_weight,
            exclude_above=exclusion_floor(self.outlier_filter, self.aggregator.shape[1]),
            evidence=None if self.evidence is None else self.evidence.for_round(config.round_id),
            copies=self.aggregator.detects_copies,
            max_flagged=flag_budget(self.outlier_filter),
        )

    def start_collecting(self, round_id: int) -> None:
        """Start collecting uploads: ``open`` -> ``collecting``."""
        state = self.state(round_id)
        self._require(state, Stage.OPEN, "start_collecting")
        self._move(state, Stage.COLLECTING)

    def submit(self, message: bytes, *, round_id: int) -> str:
        """Validate and store one upload for the round being collected; return its sender.

        Checks, in order: size and framing, round id, stage, deadline, replay,
        duplicate, mode, schema contract, the payload's own ids (they must name
        the sender), payload reuse (a payload already accepted in the round,
        under any sender), a stale payload (one another round accepted), payload.
        A refused upload leaves the round untouched.

        Raises
        ------
        UploadMalformed, StaleRound, RoundNotFound, RoundOutOfOrder, UploadLate,
        UploadReplayed, UploadDuplicate, SchemaUnknown, SchemaMajorMismatch,
        OutputSpecMismatch, UploadBindingInvalid, UploadPayloadReused, UploadPayloadStale
        """
        state = self.state(round_id)
        header, payload = decode_upload(message, max_bytes=state.config.max_upload_bytes)
        if header.round_id != round_id:
            if header.round_id < round_id:
                raise StaleRound(f"upload for round {header.round_id}; collecting round {round_id}")
            raise RoundNotFound(f"upload for round {header.round_id}, which is not open")
        self._require(state, Stage.COLLECTING, "an upload")
        now = self.clock()
        if now > state.config.deadline:
            raise UploadLate(f"upload from {header.participant_id!r} arrived after the deadline")
        if header.nonce in state.seen_nonces():
            raise UploadReplayed(f"nonce {header.nonce} was already used in round {round_id}")
        if header.participant_id in state.uploads:
            raise UploadDuplicate(f"{header.participant_id!r} already uploaded in round {round_id}")
        if header.mode != self.mode:
            raise UploadMalformed(f"upload mode {header.mode!r} differs from {self.mode!r}")
        if header.schema_hash != state.config.schema.schema_hash():
            raise SchemaInvalid("upload schema_hash does not match the round's contract")
        self.registry.validate(header.schema, state.config.schema)
        self._check_payload_binding(state, header.participant_id, payload)
        self._check_payload_fresh(state, payload)
        handle = self.aggregator.load(payload)
        state.uploads[header.participant_id] = UploadRecord(
            participant_id=header.participant_id,
            nonce=header.nonce,
            num_samples=header.num_samples,
            model_id=header.schema.model_id,
            version=str(header.schema.version),
            received_at=now,
            payload=payload,
        )
        try:
            self.store.save(state)
        except Exception:
            del state.uploads[header.participant_id]  # a refused upload leaves no trace
            raise
        self._handles.setdefault(round_id, {})[header.participant_id] = handle
        return header.participant_id

    @staticmethod
    def _check_payload_binding(state: RoundState, sender: str, payload: bytes) -> None:
        """Refuse a payload that names another sender, or one already accepted this round.

        Runs before the mode parses the payload (the shares helper stores seeds
        under the payload's ids), so a refused upload reaches no party.
        """
        own, _ = payload_ids(payload)
        if own is not None and own != sender:
            raise UploadBindingInvalid(
                f"payload names participant {own!r}, the upload header {sender!r}"
            )
        if any(u.payload == payload for u in state.uploads.values()):
            raise UploadPayloadReused(
                f"the payload from {sender!r} was already accepted in round {state.round_id}"
            )

    def _check_payload_fresh(self, state: RoundState, payload: bytes) -> None:
        """Refuse a payload that another round accepted (replayed across rounds)."""
        digest = sm3_digest(payload).hex()
        earlier = self.store.rounds_with_payload(digest, other_than=state.round_id)
        if earlier:
            raise UploadPayloadStale(
                f"the payload was already accepted in round {earlier[0]}; "
                f"round {state.round_id} needs a fresh upload"
            )

    def close(self, round_id: int) -> RoundState:
        """Close collection: ``collecting`` -> ``filtering``, or ``aborted`` if too few uploaded.

        Raises
        ------
        TooFewParticipants
            After persisting the abort, when fewer than ``min_participants`` uploaded.
        """
        state = self.state(round_id)
        self._require(state, Stage.COLLECTING, "close")
        got, need = len(state.uploads), state.config.min_participants
        if got < need:
            reason = f"only {got} of the required {need} participants uploaded"
            self._move(state, Stage.ABORTED, reason=reason)
            raise TooFewParticipants(f"round {round_id} aborted: {reason}")
        self._move(state, Stage.FILTERING)
        return state

    def close_if_due(self, round_id: int) -> bool:
        """Close the round if its deadline has passed; return whether it was closed."""
        state = self.state(round_id)
        if state.stage is Stage.COLLECTING and self.clock() > state.config.deadline:
            self.close(round_id)
            return True
        return False

    def _live_handles(self, state: RoundState) -> dict[str, UploadHandle]:
        handles = self._handles.get(state.round_id)
        if handles is None or set(handles) != set(state.uploads):
            handles = {pid: self.aggregator.load(u.payload) for pid, u in state.uploads.items()}
            self._handles[state.round_id] = handles
        return handles

    def filter(self, round_id: int) -> dict[str, float]:
        """Score every upload (one scalar each); ``filtering`` -> ``aggregating``.

        The mode scores by robust pooled Mahalanobis distance, revealing only
        aggregates and one scalar per participant, labelled with ``round_id``.
        Aborts the round (and raises :class:`TooFewParticipants`) if the filter
        leaves fewer than ``min_participants``.
        """
        state = self.state(round_id)
        self._require(state, Stage.FILTERING, "filter")
        handles = self._live_handles(state)
        state.scores = dict(self.aggregator.score(handles, round_id=round_id).scores)
        decisions = self._decide(state)
        kept = len(state.uploads) - len(state.excluded)
        if kept < state.config.min_participants:
            reason = f"filter kept {kept} of the required {state.config.min_participants}"
            self._record(state, decisions, None)
            self._move(state, Stage.ABORTED, reason=reason)
            raise TooFewParticipants(f"round {round_id} aborted: {reason}")
        self._move(state, Stage.AGGREGATING)
        return dict(state.scores)

    def _decide(self, state: RoundState) -> dict[str, Decision]:
        """Ask the filter; the decisions and exclusions are kept in ``state``."""
        decisions = decide(self.outlier_filter, state.scores, round_id=state.round_id)
        state.decisions = {p: d.to_dict() for p, d in decisions.items()}
        state.excluded = sorted(excluded_ids(decisions))
        return decisions

    def _record(
        self,
        state: RoundState,
        decisions: Mapping[str, Decision],
        terms: Mapping[str, WeightTerms] | None,
    ) -> None:
        """Audit every decision with the weight it led to (None: aborted at the filter)."""
        if self.audit is None:
            return
        events = decision_events(
            round_id=state.round_id,
            decisions=decisions,
            num_samples={p: u.num_samples for p, u in state.uploads.items()},
            terms=terms,
            publication_sm3=state.publication_sm3,
            max_weight=state.config.cap,
        )
        for details in events:
            self.audit.record("outlier.decision", details)

    def publish(self, round_id: int) -> bytes:
        """Aggregate the accepted uploads with dynamic weights; ``aggregating`` -> ``published``.

        Returns the publication bytes (``secure_fed.federation.messages`` frame).
        """
        state = self.state(round_id)
        self._require(state, Stage.AGGREGATING, "publish")
        handles = self._live_handles(state)
        accepted = {p: h for p, h in handles.items() if p not in state.excluded}
        decisions = {p: Decision.from_dict(d) for p, d in state.decisions.items()}
        self.weighting.history = dict(state.weighting_history)
        terms = self.weighting.weigh(
            {p: decisions[p].factor for p in accepted},
            max_weight=state.config.cap,
            evidence=self._evidence(handles, accepted, round_id),
            copies=self.aggregator.copies(accepted, round_id=round_id),
        )
        state.weights = {p: t.weight for p, t in terms.items()}
        aggregate = self.aggregator.reveal(
            self.aggregator.weighted_sum(accepted, state.weights), round_id=round_id
        )
        if self.sharpen_temperature < 1.0:
            aggregate = sharpen_logits(aggregate, temperature=self.sharpen_temperature)
        message = encode_publication(
            Publication(
                round_id=round_id,
                aggregate=aggregate,
                weights=state.weights,
                excluded=tuple(state.excluded),
            )
        )
        state.weighting_history = dict(self.weighting.history)
        state.publication_sm3 = sm3_digest(message).hex()
        state.publication = message  # stored with the stage: a restarted server sends it again
        self._record(state, decisions, terms)
        self._move(state, Stage.PUBLISHED)
        self._handles.pop(round_id, None)
        return message

    def _evidence(
        self,
        handles: Mapping[str, UploadHandle],
        accepted: Mapping[str, UploadHandle],
        round_id: int,
    ) -> dict[str, float] | None:
        """Evidence of the accepted uploads; the plan opens it for the whole scored roster."""
        if self.evidence is None:
            return None
        mask = self.evidence.for_round(round_id).mask(self.aggregator.shape)
        found = self.aggregator.evidence(handles, mask, round_id=round_id)
        return None if found is None else {p: found[p] for p in accepted}

    def abort(self, round_id: int, *, reason: str) -> None:
        """Abort a non-terminal round, persisting ``reason``."""
        state = self.state(round_id)
        self._move(state, Stage.ABORTED, reason=reason)
        self._handles.pop(round_id, None)

    def recover(self) -> dict[int, str]:
        """After a restart: resume or abort every stored open round.

        ``open``/``collecting`` rounds before their deadline resume collecting;
        past the deadline they close (completing or aborting on the
        ``min_participants`` rule). ``filtering``/``aggregating`` rounds resume
        from their persisted uploads. The EMA weighting history is restored
        from the newest stored round. Returns ``{round_id: outcome}``.
        """
        outcomes: dict[int, str] = {}
        last = self.store.last_round_id()
        if last is not None:
            newest = self.store.load(last)
            if newest is not None:
                self.weighting.history = dict(newest.weighting_history)
        for stored in self.store.open_rounds():
            self._states[stored.round_id] = stored
            rid = stored.round_id
            due = self.clock() > stored.config.deadline
            if stored.stage in (Stage.OPEN, Stage.COLLECTING) and due:
                if stored.stage is Stage.OPEN:
                    self.start_collecting(rid)
                try:
                    self.close(rid)
                except TooFewParticipants:
                    outcomes[rid] = "aborted"
                    continue
            outcomes[rid] = f"resumed:{self.state(rid).stage.value}"
        return outcomes
