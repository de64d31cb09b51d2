"""The aggregator operator's side of a deployment, built from ``server.toml``.

:meth:`AggregatorNode.open` opens the ledger database (migrating it), its
audit log and round store, and builds the aggregator with
:func:`~secure_fed.federation.aggregator_builder.build_aggregator` -- the function the
in-process federation uses. The ServerApp
(:mod:`secure_fed.deploy.flower.server_app`) only moves bytes between it and
the nodes; this module holds the bookkeeping a deployment adds:

* :meth:`AggregatorNode.abort_unfinished` -- after a restart, every round the
  store still holds open is aborted (``round.aborted``), nothing of it is
  released, and the federation goes on with the next round id;
* :meth:`AggregatorNode.last_publication` -- after a restart, the newest
  published round's publication, read back from the round store (the engine
  stores the bytes with the ``published`` stage, in the same transaction) and
  checked against the SM3 stored with it and the SM3 the audit log recorded
  for the round, so the ServerApp sends it again;
* :meth:`AggregatorNode.record_dropout` -- a node that did not answer a round
  in time is recorded (``participant.dropped``); the round goes on while at
  least ``min_participants`` uploads arrive (the engine's rule);
* a round's stored abort reason names the party that failed when the
  aggregator can know it: a request of its own to the key authority, the
  helper or the verifier that failed (:meth:`AggregatorNode.abort_round`), or,
  for a round with too few uploads, the party the uploads or the nodes' own
  replies say failed (``helper unavailable: DEPLOY_PARTY_UNAVAILABLE ...``)
  before the engine's count.

Round ids run from 1 upwards and are never reused. A round aborted for an
infrastructure failure only (:func:`is_infrastructure_failure`) may be run
again as a new round with the next id, up to ``[federation] max_retries``
times (:meth:`AggregatorNode.record_retry` audits ``round.retried``); the
aborted round stays aborted. Any other abort is final for its round.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from crypto.sm import SM2PrivateKey, SM2PublicKey
from crypto.sm.sm3 import sm3_digest
from privacy_ledger.audit.events import register_event
from privacy_ledger.audit.log import AuditLog
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.budget.service import PrivacyLedger
from privacy_ledger.errors import ParticipantConflict
from secure_fed.deploy.config_errors import ServerConfigInvalid
from secure_fed.deploy.errors import PartyReplyInvalid, PartyUnavailable, StoredPublicationInvalid
from secure_fed.deploy.keys import MANIFEST, load_aggregator
from secure_fed.deploy.server_config import ServerConfig, settings_of
from secure_fed.deploy.slice_key import slice_key
from secure_fed.deploy.tls import ClientTLS
from secure_fed.deploy.transport import (
    AuthorityChannels,
    VerifierChannels,
    remote_authority,
    remote_helper,
    remote_verifier,
)
from secure_fed.errors import RoundStateError, SecureFedError, TooFewParticipants
from secure_fed.federation.aggregator_builder import (
    AggregatorParts,
    build_aggregator,
    private_parts,
)
from secure_fed.federation.config import ASSET_ID, PlannedParticipant, plan_participants
from secure_fed.federation.evidence import EvidencePool
from secure_fed.federation.messages import decode_publication
from secure_fed.federation.stages import RoundConfig, RoundState, Stage
from secure_fed.federation.store import LedgerRoundStore
from secure_fed.learning.data import TaskData, load_task
from secure_fed.learning.public_logits import PUBLIC_LOGIT_BOUND
from secure_fed.secure.audit import AuditSink, LedgerAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.secure.mode import SecureAggregator
from secure_fed.secure.scoring.mahalanobis import ScoringConfig

__all__ = [
    "INFRASTRUCTURE_FAILURES",
    "PARTICIPANT_DROPPED",
    "ROUND_RETRIED",
    "AggregatorNode",
    "PublishedRound",
    "is_infrastructure_failure",
]

_log = logging.getLogger(__name__)

PARTICIPANT_DROPPED = register_event(
    "participant.dropped",
    "A participant's node did not answer a round before its timeout; the round went on without it.",
).name

ROUND_RETRIED = register_event(
    "round.retried",
    "A round aborted for an infrastructure failure is run again as a new round with the next id.",
).name

#: A participant's remote budget gate could not reach the budget API (its node's code).
_BUDGET_UNAVAILABLE = "DEPLOY_BUDGET_SERVICE_UNAVAILABLE"

#: Codes of an infrastructure failure: a party service, or a participant's budget API,
#: that could not be reached (down, timed out, TLS handshake failed).
INFRASTRUCTURE_FAILURES = frozenset({PartyUnavailable.code, _BUDGET_UNAVAILABLE})


def is_infrastructure_failure(codes: Iterable[str | None]) -> bool:
    """Whether a round that aborted with ``codes`` failed for infrastructure only (may be retried).

    ``codes`` are the typed error codes of what made the round abort: the single
    error of the aggregator's own request that failed (opening the round, or
    finishing it: a key authority, helper or verifier request), or, for a round
    with too few uploads, one per missing upload (the node's reply code, the
    aggregator's refusal code, ``None`` for a node that sent nothing in time).

    True when at least one code is in :data:`INFRASTRUCTURE_FAILURES` and every
    other is ``None``. False as soon as any other code is there: a refused plan,
    a policy violation, an invalid or forged upload, a MAC failure, a party that
    answered nonsense (``DEPLOY_PARTY_REPLY_INVALID``) or any other refusal is
    never retried automatically; nor is a round whose uploads merely did not
    come (no code at all).
    """
    seen = list(codes)
    return any(c in INFRASTRUCTURE_FAILURES for c in seen) and all(
        c is None or c in INFRASTRUCTURE_FAILURES for c in seen
    )


def _read_key(path: Path | None, passphrase_file: Path | None, field: str) -> SM2PrivateKey:
    if path is None:
        raise ServerConfigInvalid(f"{field} is required", field=field)
    try:
        passphrase = passphrase_file.read_bytes().strip() if passphrase_file else None
        return SM2PrivateKey.from_pem(path.read_bytes(), passphrase=passphrase)
    except (OSError, ValueError) as exc:
        raise ServerConfigInvalid(
            f"{field}: {path} is not a readable SM2 key: {exc}", field=field
        ) from None


def _evidence(config: ServerConfig, task: TaskData) -> EvidencePool | None:
    """Each round's labeled slice, drawn with a key no participant holds (or, tests: seeded)."""
    rows, seed = config.federation.evidence_rows, config.federation.seed
    if config.insecure_seeded_slice:
        _log.warning("evidence slice key derived from the seed: PREDICTABLE (tests only)")
        return EvidencePool.insecure_from_seed(task, rows=rows, seed=seed)
    key = slice_key(config.key_dir or config.source.parent)
    return EvidencePool.from_task(task, rows=rows, key=key)


def _plaintext_keys(config: ServerConfig, key_dir: Path) -> dict[str, SM2PublicKey]:
    """Return the participants' SM2 public keys: ``<key_dir>/participants/<id>.pub.pem``."""
    keys = {}
    for pid in config.federation.participant_ids or ():
        path = key_dir / "participants" / f"{pid}.pub.pem"
        try:
            keys[pid] = SM2PublicKey.from_pem(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise ServerConfigInvalid(
                f"server.key_dir: no readable public key of {pid!r} at {path}: {exc}",
                field="server.key_dir",
            ) from None
    return keys


def _enrol(
    ledger: PrivacyLedger, plan: list[PlannedParticipant], keys: dict[str, SM2PublicKey]
) -> None:
    """Register every planned participant and its asset in the ledger (kept if already there)."""
    for planned in plan:
        pid = planned.participant_id
        try:
            ledger.register_participant(
                pid,
                institution=planned.institution,
                kind=planned.kind,
                public_key_pem=keys[pid].to_pem(),
            )
        except ParticipantConflict:
            _log.info("participant %s is registered already with other attributes; kept", pid)
        ledger.register_asset(pid, ASSET_ID)


@dataclass(frozen=True)
class PublishedRound:
    """A published round read back from the store: its id, publication and accepted uploaders."""

    round_id: int
    publication: bytes
    accepted: frozenset[str]


class AggregatorNode:
    """The aggregator of a deployed federation (see the module docstring)."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        parts: AggregatorParts,
        audit: AuditSink,
        shape: tuple[int, int],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config, self.parts, self.audit, self.shape = config, parts, audit, shape
        self.engine, self.clock = parts.engine, clock
        self.handler = _Handler(parts.handler, self)
        self.settings = settings_of(config.federation)
        #: Per round, why uploads did not count: a dropout's or a refusal's reason.
        self._missed: dict[int, list[str]] = {}
        #: Per round, the typed code of each missing upload (None: no code known).
        self._missed_codes: dict[int, list[str | None]] = {}
        #: (new, aborted) round ids of the retries (read back from a ledger audit log instead).
        self._retried: set[tuple[int, int]] = set()

    def parties(self) -> dict[str, str]:
        """Return the party services' base URLs in ``server.toml``, by party name."""
        named = {
            "key authority": self.config.authority_url,
            "helper": self.config.helper_url,
            "verifier": self.config.verifier_url,
        }
        return {name: url.rstrip("/") for name, url in named.items() if url}

    def failed_party(self, text: str) -> str | None:
        """Return ``<party> unavailable: <code>`` if ``text`` tells of a failed party service.

        A failure is one of the transport's codes (``DEPLOY_PARTY_UNAVAILABLE``,
        ``DEPLOY_PARTY_REPLY_INVALID``: the party is the one whose URL ``text``
        names, else ``a party service``) or a participant's budget API that could
        not be reached (``DEPLOY_BUDGET_SERVICE_UNAVAILABLE``).
        """
        code = next((c for c in _PARTY_FAILURES if c in text), None)
        if code is None:
            return None
        if code == _BUDGET_UNAVAILABLE:
            return f"budget API unavailable: {code}"
        urls = self.parties().items()
        name = next((n for n, u in urls if f"{u}/" in text or f"{u} " in text), None)
        how = "unavailable" if code == PartyUnavailable.code else "answered nonsense"
        return f"{name or 'a party service'} {how}: {code}"

    def _too_few(self, round_id: int) -> None:
        """Abort a collecting round with too few uploads, naming a failed party if known.

        Only when a failed party explains the missing uploads; otherwise the
        engine's own close aborts it with its count.
        """
        try:
            state = self.engine.state(round_id)
        except RoundStateError:
            return
        got, need = len(state.uploads), state.config.min_participants
        if state.stage is not Stage.COLLECTING or got >= need:
            return
        missed = self._missed.get(round_id, [])
        named = [found for why in missed if (found := self.failed_party(why))]
        if not named:
            return
        first = named[0]
        reason = (
            f"{first} (the cause of {sum(n == first for n in named)} of {len(missed)} missing "
            "uploads); "
            f"only {got} of the required {need} participants uploaded"
        )
        self.abort_round(round_id, reason=reason)
        raise TooFewParticipants(f"round {round_id} aborted: {reason}")

    def record_refusal(self, round_id: int, error: SecureFedError) -> None:
        """Remember that an upload of ``round_id`` was refused with ``error``."""
        self._missed.setdefault(round_id, []).append(f"{error.code}: {error.message}")
        self._missed_codes.setdefault(round_id, []).append(error.code)

    def missed_codes(self, round_id: int) -> list[str | None]:
        """Return the typed code of each upload of ``round_id`` that did not count."""
        return list(self._missed_codes.get(round_id, []))

    @classmethod
    def open(
        cls, config: ServerConfig, *, clock: Callable[[], float] = time.time
    ) -> AggregatorNode:
        """Open the ledger, audit log and round store; build the aggregator.

        Raises
        ------
        ServerConfigInvalid
            If a key file is missing or unreadable, or the mode needs parties not configured.
        """
        federation = config.federation
        signer = _read_key(
            config.log_signing_key, config.log_key_passphrase_file, "server.log_signing_key"
        )
        log = AuditLog(signer=signer, origin=config.log_origin)
        ledger = PrivacyLedger.from_url(config.ledger_url, audit=log)
        audit = LedgerAuditSink(engine=ledger.engine, log=log)
        plan = plan_participants(federation)
        keys = _aggregator_keys(config, audit)
        _enrol(ledger, plan, keys.participant_keys)
        evidence: EvidencePool | None = None
        if config.builtin:
            task = load_task(config.builtin, seed=federation.seed)
            evidence = _evidence(config, task)
            shape = (len(task.public_x), task.num_classes)
            parts = private_parts(task, federation)
            rows = {p.participant_id: len(idx) for p, idx in zip(plan, parts, strict=True)}
        else:
            num_public = config.num_public
            shape, rows = (num_public, config.num_classes), dict(config.rows)
        keys.check(shape=shape, plan=plan, quorum=federation.quorum())
        built = build_aggregator(
            federation,
            plan=plan,
            registered_rows=rows,
            num_classes=shape[1],
            aggregator=keys.aggregator(shape, ScoringConfig(min_subset=federation.quorum())),
            params=keys.params,
            participant_keys=keys.participant_keys,
            store=LedgerRoundStore(engine=ledger.engine, namespace=config.namespace),
            audit=audit,
            receipt_key=_receipt_key(config, keys),
            evidence=evidence,
            clock=clock,
        )
        return cls(config=config, parts=built, audit=audit, shape=shape, clock=clock)

    def abort_unfinished(self) -> list[int]:
        """Abort every round the store holds unfinished (a restart); return their ids."""
        aborted = []
        for stored in self.engine.store.open_rounds():
            stage = stored.stage.value
            why = f"the ServerApp restarted while the round was {stage!r}; nothing was released"
            self.abort_round(stored.round_id, reason=why)
            aborted.append(stored.round_id)
        return aborted

    def last_publication(self) -> PublishedRound | None:
        """Return the newest published round's publication, checked, with its accepted uploaders.

        None when no round was published, or the newest published round was
        stored before publications were kept (logged). Rounds aborted after it
        are passed over: their nodes may never have received it.

        Raises
        ------
        StoredPublicationInvalid
            If the stored publication cannot be read, does not match the SM3
            stored with it or the SM3 the audit log recorded for the round, or
            is not that round's publication.
        """
        store = self.engine.store
        for rid in range(store.last_round_id() or 0, 0, -1):
            try:
                state = store.load(rid)
            except (ValueError, TypeError, KeyError) as exc:
                raise StoredPublicationInvalid(f"round {rid}: the stored state: {exc}") from None
            if state is not None and state.stage is Stage.PUBLISHED:
                return self._checked(state)
        return None

    def _checked(self, state: RoundState) -> PublishedRound | None:
        """Check a published round's stored publication (see :meth:`last_publication`)."""
        rid, publication = state.round_id, state.publication
        if publication is None:
            _log.warning("round %d was stored without its publication; it is not sent again", rid)
            return None
        digest = sm3_digest(publication).hex()
        if not hmac.compare_digest(digest, state.publication_sm3 or ""):
            raise StoredPublicationInvalid(
                f"round {rid}: the stored publication does not match the SM3 stored with it"
            )
        audited = self._audited_digests(rid)
        if audited is not None and not any(hmac.compare_digest(digest, d) for d in audited):
            raise StoredPublicationInvalid(
                f"round {rid}: the stored publication's SM3 {digest} is not the one the "
                "audit log recorded for the round"
            )
        try:
            found = decode_publication(publication, max_bytes=len(publication)).round_id
        except SecureFedError as exc:
            raise StoredPublicationInvalid(f"round {rid}: {exc.message}") from None
        if found != rid:
            raise StoredPublicationInvalid(
                f"round {rid}: the stored publication is round {found}'s"
            )
        return PublishedRound(
            round_id=rid, publication=publication, accepted=frozenset(state.uploads)
        )

    def _audited_digests(self, round_id: int) -> list[str] | None:
        """Publication SM3s the audit log's ``outlier.decision`` events give ``round_id``.

        None when the audit sink is not the ledger's (nothing to read back).
        """
        if not isinstance(self.audit, LedgerAuditSink):
            return None
        query = select(AuditEntryRow.entry).where(AuditEntryRow.event == "outlier.decision")
        with Session(self.audit.engine) as session:
            entries = session.execute(query).scalars().all()
        digests = []
        for entry in entries:
            try:
                fields = json.loads(bytes(entry)).get("fields", {})
            except (ValueError, AttributeError):  # vouches for nothing (ledger verify flags it)
                continue
            if fields.get("round_id") == round_id and isinstance(
                fields.get("publication_sm3"), str
            ):
                digests.append(fields["publication_sm3"])
        return digests

    def abort_round(self, round_id: int, *, reason: str) -> None:
        """Abort ``round_id`` unless it already ended, and record it (``round.aborted``)."""
        try:
            stage = self.engine.state(round_id).stage.value
        except RoundStateError:  # the round could not even be opened
            stage = "unopened"
        if stage in ("published", "aborted"):
            return
        party = self.failed_party(reason)
        name, _, code = (party or "").rpartition(": ")
        if party is not None and reason.startswith(code):  # "<code>: <message>" of a request
            reason = f"{name}: {reason}"
        if stage != "unopened":
            self.engine.abort(round_id, reason=reason)
        self.audit.record("round.aborted", {"round": round_id, "stage": stage, "reason": reason})
        _log.warning("round %d aborted (was %s): %s", round_id, stage, reason)

    def next_round_ids(self) -> range:
        """Round ids still to run: after the newest stored round, up to ``federation.rounds``."""
        last = self.engine.store.last_round_id() or 0
        return range(last + 1, self.config.federation.rounds + 1)

    def round_config(self, round_id: int) -> RoundConfig:
        """Return the config round ``round_id`` opens with (as the in-process federation's)."""
        f = self.config.federation
        return RoundConfig(
            round_id=round_id,
            public_set_id=f"{self.config.builtin or 'own'}-public",
            public_set_sm3=self.config.public_sm3,
            schema=self.parts.contract,
            mode=f.mode,
            num_public=self.shape[0],
            min_participants=f.quorum(),
            deadline=self.clock() + self.config.reply_timeout,
            projection_seed=f.seed,
            max_upload_bytes=64 * 1024 * 1024,
            max_weight=f.weight_cap(),
        )

    def record_dropout(
        self, round_id: int, participant_id: str, reason: str, *, code: str | None = None
    ) -> None:
        """Record that ``participant_id`` sent nothing usable in round ``round_id``.

        ``code`` is the node's own typed code when it said why (None otherwise).
        """
        self.audit.record(
            PARTICIPANT_DROPPED,
            {"round": round_id, "participant": participant_id, "reason": reason},
        )
        self._missed.setdefault(round_id, []).append(reason)
        self._missed_codes.setdefault(round_id, []).append(code)
        _log.warning("round %d: %s dropped out: %s", round_id, participant_id, reason)

    def record_retry(self, round_id: int, *, retries: int, reason: str, attempt: int) -> None:
        """Audit that round ``round_id`` runs aborted round ``retries`` again (``round.retried``).

        ``attempt`` counts the retries of the federation so far, this one included.
        """
        self._retried.add((round_id, retries))
        self.audit.record(
            ROUND_RETRIED,
            {
                "round": round_id,
                "retries": retries,
                "reason": reason,
                "attempt": attempt,
                "namespace": self.config.namespace,
            },
        )
        _log.warning("round %d runs again aborted round %d (retry %d)", round_id, retries, attempt)

    def _retries(self) -> list[tuple[int, int]]:
        """Return ``(new round, aborted round)`` of each ``round.retried`` of this namespace."""
        if not isinstance(self.audit, LedgerAuditSink):
            return sorted(self._retried)
        query = select(AuditEntryRow.entry).where(AuditEntryRow.event == ROUND_RETRIED)
        with Session(self.audit.engine) as session:
            entries = session.execute(query).scalars().all()
        found = []
        for entry in entries:
            try:
                fields = json.loads(bytes(entry)).get("fields", {})
            except (ValueError, AttributeError):
                continue
            new, old = fields.get("round"), fields.get("retries")
            if fields.get("namespace") == self.config.namespace and isinstance(old, int):
                found.append((new if isinstance(new, int) else old, old))
        return found

    def retried_rounds(self) -> set[int]:
        """Ids of the aborted rounds of this namespace that a later round ran again."""
        return {old for _, old in self._retries()}

    def last_round_id(self) -> int:
        """Return the newest round id used: stored, or given to a retry (maybe never opened)."""
        stored = self.engine.store.last_round_id() or 0
        return max([stored, *(new for new, _ in self._retries())])

    def rounds_left(self) -> int:
        """How many of ``federation.rounds`` are still to run (retried rounds do not count).

        A published round counts, and so does an aborted one unless a later
        round ran it again.
        """
        store, retried = self.engine.store, self.retried_rounds()
        ended = 0
        for rid in range(1, (store.last_round_id() or 0) + 1):
            state = store.load(rid)
            if state is None:
                continue
            published = state.stage is Stage.PUBLISHED
            ended += published or (state.stage is Stage.ABORTED and rid not in retried)
        return max(0, self.config.federation.rounds - ended)

    def published_rounds(self) -> int:
        """How many rounds of this namespace's store were published."""
        store = self.engine.store
        found = (store.load(rid) for rid in range(1, (store.last_round_id() or 0) + 1))
        return sum(1 for state in found if state is not None and state.stage is Stage.PUBLISHED)

    def party_url(self, reason: str) -> str | None:
        """Return the base URL of the party service ``reason`` says failed (None: not one)."""
        party = self.failed_party(reason)
        if party is None:
            return None
        name = party.split(" unavailable:")[0].split(" answered")[0]
        return self.parties().get(name)


#: Codes of a party service that failed (not one that refused): the transport's, the budget's.
_PARTY_FAILURES = (PartyUnavailable.code, PartyReplyInvalid.code, _BUDGET_UNAVAILABLE)


class _Handler:
    """The engine's aggregator handler, with the node's bookkeeping of why uploads missed.

    A refused upload is remembered for its round; a round with too few uploads
    is aborted naming the failed party when one explains it. Everything else
    is the wrapped handler's.
    """

    def __init__(self, inner: Any, node: AggregatorNode) -> None:
        self._inner, self._node = inner, node

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def handle_upload(self, envelope: bytes, *, round_id: int) -> Any:
        """Hand ``envelope`` to the engine; a refusal is remembered for the round."""
        try:
            return self._inner.handle_upload(envelope, round_id=round_id)
        except SecureFedError as exc:
            self._node.record_refusal(round_id, exc)
            raise

    def finish_round(self, round_id: int) -> bytes:
        """Close, filter, aggregate; too few uploads for a known party failure name it."""
        self._node._too_few(round_id)
        return bytes(self._inner.finish_round(round_id))


class _Keys:
    """The aggregator's key material: the key ceremony's directory, or plaintext's public keys."""

    def __init__(self, *, config: ServerConfig, audit: AuditSink) -> None:
        self.config, self.audit = config, audit
        key_dir = config.key_dir or config.source.parent
        self.loaded: Any = None
        if (key_dir / MANIFEST).exists():
            self.loaded = load_aggregator(
                key_dir,
                authority=self._authority(),
                helper=self._helper(),
                audit=audit,
                verifier=self._verifier(),
            )
            self.participant_keys: dict[str, SM2PublicKey] = dict(self.loaded.participant_keys)
            self.params: str = self.loaded.params
            self.receipt_key: SM2PublicKey | None = self.loaded.receipt_key
        else:
            self.participant_keys = _plaintext_keys(config, key_dir)
            self.params, self.receipt_key = "float32", None

    def _tls(self) -> ClientTLS | None:
        c = self.config
        if c.ca_file is None:
            return None
        return ClientTLS(ca=c.ca_file, cert=c.client_cert, key=c.client_key)

    def _authority(self) -> AuthorityChannels:
        if not self.config.authority_url:
            return AuthorityChannels()
        return remote_authority(self.config.authority_url, tls=self._tls())

    def _helper(self) -> Callable[[bytes], bytes] | None:
        if not self.config.helper_url:
            return None
        return remote_helper(self.config.helper_url, tls=self._tls())

    def _verifier(self) -> VerifierChannels | None:
        """Return the verifier service's channels (uploads forwarded, requests attested)."""
        if not self.config.verifier_url:
            return None
        return remote_verifier(self.config.verifier_url, tls=self._tls())

    def check(self, *, shape: tuple[int, int], plan: list[PlannedParticipant], quorum: int) -> None:
        """Refuse keys made for another mode, shape, roster or quorum than ``server.toml``'s."""
        mode = self.config.federation.mode
        if self.loaded is None:
            if mode != "plaintext":
                raise ServerConfigInvalid(
                    f"server.key_dir: mode {mode!r} needs the key ceremony's aggregator "
                    f"directory ({MANIFEST} not found)",
                    field="server.key_dir",
                )
            return
        if self.loaded.manifest.verifier_key is not None and not self.config.verifier_url:
            raise ServerConfigInvalid(
                "parties.verifier_url: the key authority pins the key ceremony's verifier "
                "and decrypts nothing it did not attest; name the verifier service",
                field="parties.verifier_url",
            )
        found = (self.loaded.mode, tuple(self.loaded.shape), set(self.loaded.participant_ids))
        wanted = (mode, shape, {p.participant_id for p in plan})
        if found != wanted or self.loaded.min_participants > quorum:
            raise ServerConfigInvalid(
                f"server.key_dir: keys made for (mode, shape, participants) {found} and quorum "
                f"{self.loaded.min_participants}, server.toml needs {wanted} and quorum {quorum}",
                field="server.key_dir",
            )

    def aggregator(self, shape: tuple[int, int], scoring: ScoringConfig) -> SecureAggregator:
        """Build the mode's aggregator."""
        if self.loaded is not None:
            built: SecureAggregator = self.loaded.aggregator(
                bound=PUBLIC_LOGIT_BOUND, scoring=scoring
            )
            return built
        deployment = SecureDeployment.create(
            mode="plaintext",
            shape=shape,
            participant_ids=list(self.participant_keys),
            min_participants=1,
            audit=self.audit,
            scoring=scoring,
        )
        return deployment.aggregator(bound=PUBLIC_LOGIT_BOUND)


def _aggregator_keys(config: ServerConfig, audit: AuditSink) -> _Keys:
    return _Keys(config=config, audit=audit)


def _receipt_key(config: ServerConfig, keys: _Keys) -> SM2PublicKey | None:
    """Return the receipts' public key when ``receipts.required`` (else None)."""
    if not config.receipts_required:
        return None
    if config.receipt_public_key is not None:
        return SM2PublicKey.from_pem(config.receipt_public_key.read_bytes())
    if keys.receipt_key is None:
        raise ServerConfigInvalid(
            "receipts.required needs receipts.public_key or a key directory naming one",
            field="receipts.public_key",
        )
    return keys.receipt_key
