"""The key authority: CKKS secret key holder, Beaver-triple dealer, gatekeeper of releases.

The key authority learns only what it is asked to decrypt, and it decrypts
only what :class:`~secure_fed.secure.release_policy.ReleasePolicy` allows (the
same policy as the shares-mode helper): aggregates over at least
``min_participants`` distinct contributors (the published aggregate, the
scoring mean, the pooled second moments) and single scalar scores, one
participant at a time. The kind and contributor count come from the
ciphertext's own header, read before anything is parsed, so an upload is
refused whatever the request calls it. A refusal is
:class:`~secure_fed.errors.DecryptionRefused` and an ``access.denied`` audit
event. Released values are noise-flooded by
:mod:`crypto.ckks` (Li and Micciancio, EUROCRYPT 2021). Optional central DP adds
Gaussian noise to the published aggregate and charges every contributor one
participant-level Gaussian mechanism (Dwork and Roth 2014, Theorem A.1 via the
ledger's RDP accountant). Every request and release is a ``decryption.*`` audit
event and a row of :attr:`KeyAuthority.log`, which the revelation tests inspect.

With a publication epoch (``publication_keys``, the ``ckks`` mode's default) the
authority holds two secret keys: the plan's publication is decrypted only under
the publication epoch (``CKKS_PUBLICATION``, flooded at ``s >= 40`` bits), every
other step only under the scoring epoch; each request names the epoch it asks
for (``epoch``, signed) and a mismatch is refused. Each epoch counts its own
releases against its own sized ``t``.

In shares mode the authority holds no shares; it deals Beaver triples
(:func:`crypto.shares.deal_triples`) to the aggregator and the helper.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from crypto.ckks import (
    EncryptedMatrix,
    KeyAuthorityKeys,
    decrypt_aggregate,
    decrypt_checked_publication,
    decrypt_score,
    generate_keys,
    load_encrypted,
)
from crypto.ckks.wire import claimed_kind
from crypto.errors import AggregateInconsistent, CryptoError, ReleaseLimitReached
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    KeyAuthorityConfigInvalid,
    KeyEpochExhausted,
    ModeSetupInvalid,
    PublicationInconsistent,
    ReleaseRefused,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
)
from secure_fed.secure.audit import AuditSink, record_plan_installed
from secure_fed.secure.ckks_claims import check_claim, claim_plan_fields
from secure_fed.secure.consortium_policy import PolicyPin, check_consortium
from secure_fed.secure.modes.ckks_scoring import moment_matrix
from secure_fed.secure.parties.central_dp import (
    CentralDP,
    ChargeGate,
    add_central_noise,
    central_sensitivity,
)
from secure_fed.secure.parties.dealer import Dealer, compare_request, deal_request
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.publication_check import ciphertext_sm3, split_witness
from secure_fed.secure.release_plan import PlanBook, ReleasePlan
from secure_fed.secure.release_policy import (
    AGGREGATE_PURPOSES,
    PURPOSES,
    SCALAR_PURPOSES,
    DecryptionRecord,
    ReleasePolicy,
    ReleaseRequest,
    ReleaseRule,
)
from secure_fed.secure.server_auth import (
    FreshnessStore,
    RequestVerifier,
    ServerIdentity,
    Signer,
    VerifiedRequest,
    authenticate_request,
)
from secure_fed.wire import (
    KEY_AUTHORITY_REPLY,
    KEY_AUTHORITY_REQUEST,
    encode_array,
    encode_frame,
    number_from_wire,
)

__all__ = [
    "AGGREGATE_PURPOSES",
    "DEFAULT_MAX_RELEASES",
    "CentralDP",
    "DecryptionRecord",
    "KeyAuthority",
    "SignedRequestRecord",
    "compare_request",
    "decryption_request",
    "deal_request",
    "plan_request",
]

_log = logging.getLogger(__name__)

#: Decrypted ciphertexts one key epoch may release when ``max_releases`` is not set:
#: the preset's ``max_decryptions`` (the ``t`` its flooding is sized for); then rotate.
DEFAULT_MAX_RELEASES: int | None = None


@dataclass(frozen=True)
class SignedRequestRecord:
    """One authenticated request in the key authority's decryption log, granted or not.

    ``signed_header`` and ``signature`` let anyone holding the aggregator's public
    key check who asked for what; ``claim`` is what the auditor recomputes.
    """

    round_id: int
    purpose: str
    request_sm3: str
    signer: str
    nonce: str
    signed_header: bytes
    signature: bytes
    claim: dict[str, object]
    ciphertext_sm3: str
    granted: bool
    reason: str | None = None


@dataclass
class KeyAuthority(Dealer):
    """The key authority party; talks to the aggregator in bytes (:meth:`handle`).

    Build with :meth:`for_ckks` (generates a CKKS_SCORING key epoch); without
    ``keys`` it only deals Beaver triples (shares mode).

    Parameters
    ----------
    min_participants
        Smallest distinct participant set of a decrypted aggregate (>= 2).
    keys
        The CKKS key epoch (``None`` in shares mode).
    publication_keys
        The publication epoch (``None``: the publication is decrypted under ``keys``).
    audit
        Sink of ``key.generated``, ``decryption.*`` and ``access.denied`` events.
    central_dp, budget
        Optional central DP on the published aggregate and the gate it charges.
    max_request_bytes
        Refuse larger requests before parsing (below the wire table's ceiling).
    release_rules
        Extra release rules, after the built-in ones and the round's release plan.
    enrolled, upload_shape
        The enrolled participants (a plan's roster must be among them) and ``(N, C)``.
    aggregator
        The enrolled aggregator's SM2 identity; every request must be signed by
        it (without one, every request is refused).
    max_releases
        Decrypted ciphertexts this key epoch may release before it must be rotated
        (each ciphertext of a request counts: a ``10,000 x 10`` aggregate is 25
        under ``CKKS_SCORING``). ``None``: the preset's ``max_decryptions``, the
        ``t`` its noise flooding is sized for; a larger value is refused.
    nonces
        Where the request verifiers keep served nonces and rounds
        (:class:`~secure_fed.secure.parties.nonces.NonceStore`: a restart refuses
        a replay too); ``None`` keeps them in memory.
    plan_journal
        Where every installed plan and release is written before it is answered
        (:class:`~secure_fed.secure.plan_journal.PlanJournal`): a restarted party
        resumes each round's plan, refuses another plan for it and never opens a
        round's publication twice; ``None`` keeps them in memory.
    consortium
        The consortium's signed policy as this authority pinned it
        (:class:`~secure_fed.secure.consortium_policy.PolicyPin`): a plan outside
        it is refused (``PLAN_OUTSIDE_POLICY``, audited). Its quorum must be
        ``min_participants``; its participants become ``enrolled``.
    """

    min_participants: int
    keys: KeyAuthorityKeys | None = None
    publication_keys: KeyAuthorityKeys | None = None
    aggregator: ServerIdentity | None = None
    max_releases: int | None = DEFAULT_MAX_RELEASES
    audit: AuditSink | None = None
    central_dp: CentralDP | None = None
    budget: ChargeGate | None = None
    max_request_bytes: int = 256 << 20
    release_rules: tuple[ReleaseRule, ...] = ()
    enrolled: frozenset[str] | None = None
    upload_shape: tuple[int, int] | None = None
    nonces: FreshnessStore | None = field(default=None, repr=False)
    plan_journal: PlanJournal | None = field(default=None, repr=False)
    consortium: PolicyPin | None = field(default=None, repr=False)
    log: list[DecryptionRecord] = field(default_factory=list)
    requests: list[SignedRequestRecord] = field(default_factory=list)
    policy: ReleasePolicy = field(init=False, repr=False)
    plans: PlanBook = field(init=False, repr=False)
    _verifier: RequestVerifier | None = field(init=False, repr=False, default=None)
    _plan_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)
    _range_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.min_participants, int) or self.min_participants < 2:
            raise KeyAuthorityConfigInvalid(
                f"min_participants must be an integer >= 2, got {self.min_participants!r}"
            )
        if self.max_releases is not None and (
            not isinstance(self.max_releases, int) or self.max_releases < 1
        ):
            raise KeyAuthorityConfigInvalid(
                f"max_releases must be an integer >= 1 or None, got {self.max_releases!r}"
            )
        sized = self.keys.preset.max_decryptions if self.keys is not None else None
        if sized is not None and self.max_releases is not None and self.max_releases > sized:
            raise KeyAuthorityConfigInvalid(
                f"max_releases {self.max_releases} exceeds the {sized} decryptions "
                f"{self.keys.preset.name} floods for"  # type: ignore[union-attr]
            )
        if self.aggregator is not None:
            kind, sender, store = KEY_AUTHORITY_REQUEST, self.aggregator, self.nonces
            self._verifier = RequestVerifier(kind, sender, store=store, channel="decrypt")
            # plans are fixed ahead of a round's decryptions: their own freshness window
            self._plan_verifier = RequestVerifier(kind, sender, store=store, channel="plan")
            # range checks run at an upload's load, which belongs to no round of its own
            self._range_verifier = RequestVerifier(
                kind, sender, any_round=True, store=store, channel="range"
            )
        if self.central_dp is not None and self.budget is None:
            raise KeyAuthorityConfigInvalid("central_dp needs a budget gate to charge")
        if self.consortium is not None:
            self.enrolled = check_consortium(
                self.consortium, self.min_participants, self.enrolled, self.upload_shape
            )
        self.plans = PlanBook(
            min_participants=self.min_participants,
            enrolled=self.enrolled,
            shape=self.upload_shape,
            journal=self.plan_journal,
            policy=self.consortium,
        )
        self.policy = ReleasePolicy(
            party="key_authority",
            min_participants=self.min_participants,
            refusal=DecryptionRefused,
            audit=self.audit,
            log=self.log,
            rules=(self.plans, *self.release_rules),
        )

    @classmethod
    def for_ckks(
        cls,
        *,
        min_participants: int,
        preset: str = "CKKS_SCORING",
        publication_preset: str | None = None,
        **kwargs: object,
    ) -> KeyAuthority:
        """Generate a key epoch (and a publication epoch) and return the authority holding them."""
        pub = None if publication_preset is None else generate_keys(publication_preset)
        ka = cls(
            min_participants=min_participants,
            keys=generate_keys(preset),
            publication_keys=pub,
            **kwargs,  # type: ignore[arg-type]
        )
        if ka.audit is not None and ka.keys is not None:
            ka.audit.record(
                "key.generated",
                {"kind": "ckks", "preset": preset, "fingerprint": ka.keys.fingerprint.hex()},
            )
            if pub is not None:
                fields = {"kind": "ckks", "preset": publication_preset, "role": "publication"}
                ka.audit.record("key.generated", {**fields, "fingerprint": pub.fingerprint.hex()})
        return ka

    @property
    def public_context(self) -> bytes:
        """Serialized public context (distributed once per key epoch)."""
        return self._keys().public_context.data

    @property
    def fingerprint(self) -> bytes:
        """SM3 fingerprint of the public context."""
        return self._keys().fingerprint

    @property
    def publication_context(self) -> bytes:
        """Serialized public context of the publication epoch."""
        return self._publication().public_context.data

    @property
    def publication_fingerprint(self) -> bytes:
        """SM3 fingerprint of the publication epoch's public context."""
        return self._publication().fingerprint

    def _keys(self) -> KeyAuthorityKeys:
        if self.keys is None:
            raise KeyAuthorityConfigInvalid("this key authority holds no CKKS keys (shares mode)")
        return self.keys

    def _publication(self) -> KeyAuthorityKeys:
        if self.publication_keys is None:
            raise KeyAuthorityConfigInvalid("this key authority holds no publication epoch")
        return self.publication_keys

    def _epoch_named(self, header: Mapping[str, object]) -> KeyAuthorityKeys:
        """Return the epoch a request names (``epoch``: hex fingerprint; absent: scoring)."""
        keys, epoch = self._keys(), header.get("epoch")
        if epoch is None:
            return keys
        for candidate in (keys, self.publication_keys):
            if candidate is not None and epoch == candidate.fingerprint.hex():
                return candidate
        raise AuthorityRequestMalformed(f"request names no key epoch of this authority: {epoch!r}")

    def _check_step_epoch(self, ask: ReleaseRequest, step: str, keys: KeyAuthorityKeys) -> None:
        """Refuse the publication under the scoring epoch, anything else under the publication's."""
        if self.publication_keys is None:
            return
        wanted = self.publication_keys if step == "publication" else self._keys()
        if keys is not wanted:
            named = "publication" if keys is self.publication_keys else "scoring"
            self._deny(
                ask,
                f"the plan's {step} is decrypted only under the "
                f"{'publication' if step == 'publication' else 'scoring'} epoch, not the {named}",
                DecryptionRefused,
            )

    # -- decryption ---------------------------------------------------------------

    def handle(self, request: bytes) -> bytes:
        """Serve one signed decryption request (bytes in, bytes out).

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed
            Not signed by the enrolled aggregator, altered, or replayed.
        AuthorityRequestMalformed
            Bad frame, header, claim or ciphertext bytes.
        DecryptionRefused
            Not an aggregate over enough contributors nor a single scalar score,
            a centre this authority did not release, or an exhausted key epoch.
        """
        verified = self._verify(request)
        header = verified.header
        round_id, purpose, ids, shape = _parse_request(header)
        claim = check_claim(header.get("claim"), purpose=purpose, ids=ids)
        keys = self._epoch_named(header)
        payload, witness = split_witness(header, verified.payload)
        signed = _signed_fields(verified, claim)
        self._emit("decryption.requested", round_id, purpose, shape, ids, signed=signed)
        try:
            ask = self._ask(payload, round_id, purpose, ids, shape)
            ask = replace(ask, **plan_fields(claim))  # type: ignore[arg-type]
            if ask.purpose in SCALAR_PURPOSES and ask.samples not in (None, shape[0]):
                self.policy.refuse(ask, f"the claim's {ask.samples} rows are not the shape's")
            self._check_epoch(ask, keys)  # an exhausted epoch releases nothing
            self.policy.check(ask)  # before parsing: the kind and count are the header's claims
            step = self._release_step(ask)
            self._check_step_epoch(ask, step, keys)
            self._check_witness(ask, step, witness)
        except ReleaseRefused as exc:
            self._journal(verified, claim, granted=False, reason=str(exc))
            raise
        try:
            if witness is not None:
                values = self._decrypt_checked(payload, witness, shape, keys)
            else:
                values = self._decrypt(payload, ask.value_kind, shape, keys)
        except ReleaseLimitReached as exc:  # this request would cross the sized t
            self._journal(verified, claim, granted=False, reason=str(exc))
            self._deny(ask, str(exc), KeyEpochExhausted)
            raise AssertionError from exc  # unreachable: _deny raises
        except AggregateInconsistent as exc:  # released nothing: the publication is spent
            self._journal(verified, claim, granted=False, reason=str(exc))
            self.plans.observe(ask, None)  # the round's publication is spent, unopened
            self._deny(ask, str(exc), PublicationInconsistent)
            raise AssertionError from exc  # unreachable: _deny raises
        if step == "moments":  # the plan's one covariance, as the C x C second moment
            values = self._moment_matrix(values, len(ids))
        # the plan's publication is the round's only first-order release: it, and only
        # it, is noised and charged, whatever purpose label the request carries
        dp = step == "publication" and self.central_dp is not None
        if dp:
            values = self._central_noise(values, ids, header, round_id)
        self._journal(verified, claim, granted=True)
        self.policy.released(replace(ask, shape=tuple(values.shape)), central_dp=dp, values=values)
        if step == "copies":  # the distance stays here: only the counts leave, at the end
            values = self._copy_counts(round_id)
        meta, raw = encode_array(values)
        reply = {"purpose": purpose, "array": meta, "central_dp": dp}
        return encode_frame(KEY_AUTHORITY_REPLY, reply, raw)

    def _copy_counts(self, round_id: int) -> np.ndarray:
        """Return the copies step's reply: nothing until the last pair, then the counts.

        The counts follow the copy set's sorted order; a ``decryption.released``
        event of step ``copies`` names them (the distances are never audited nor sent).
        """
        tracker = self.plans.tracker(round_id)
        assert tracker is not None and tracker.copy_set is not None
        if tracker.phase == "copies":
            return np.zeros(0)
        ids = tracker.copy_set
        counts = [tracker.copies[p] for p in ids]
        if self.audit is not None:
            self.audit.record(
                "decryption.released",
                {
                    "party": "key_authority",
                    "round_id": round_id,
                    "purpose": "distance",
                    "step": "copies",
                    "contributors": len(ids),
                    "participant_ids": list(ids),
                    "shape": [len(ids)],
                    "central_dp": False,
                    "copies": dict(zip(ids, counts, strict=True)),
                    "pairs": len(tracker.distances),
                },
            )
        return np.array(counts, dtype=np.float64)

    def install_plan(self, request: bytes) -> bytes:
        """Fix a round's release plan from a signed request; return the plan as fixed.

        ``request`` is built by :func:`plan_request` with the enrolled aggregator's
        key (purpose ``"plan"``, the plan's round); the aggregator adopts the reply.

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed
            Not signed by the enrolled aggregator, altered, for another purpose or
            round than its plan, or replayed (an ``access.denied`` event).
        ModeSetupInvalid
            A malformed plan, a second plan for the round, or one outside this
            authority's bounds (a lower ``min_participants`` is raised to its own).
        """
        verified = self._verify(request, self._plan_verifier, op="plan")
        try:
            if verified.purpose != "plan":
                raise ServerRequestUnauthenticated(f"purpose {verified.purpose!r} is not 'plan'")
            plan = ReleasePlan.from_bytes(verified.payload)
            if plan.round_id != verified.round_id:
                raise ServerRequestUnauthenticated(
                    f"the plan names round {plan.round_id}, the request round {verified.round_id}"
                )
        except ServerRequestUnauthenticated as exc:
            self._denied(exc, op="plan")
            raise
        fresh = plan.round_id not in self.plans.trackers
        try:
            fixed = self.plans.install(plan).plan
        except ModeSetupInvalid as exc:
            self._plan_denied(plan.round_id, exc)
            raise
        if fresh:  # a resent identical plan changes nothing and is not recorded again
            signed = {
                "signer": verified.signer,
                "nonce": verified.nonce,
                "request_sm3": verified.request_sm3,
            }
            record_plan_installed(
                self.audit,
                party="key_authority",
                plan_bytes=fixed.to_bytes(),
                participants=self.enrolled,
                request=signed,
            )
        return fixed.to_bytes()

    def _plan_denied(self, round_id: int, exc: ModeSetupInvalid) -> None:
        """Audit a refused plan (another plan for a round, or one outside the bounds)."""
        _log.warning("key authority refused the plan of round %d: %s", round_id, exc)
        if self.audit is not None:
            self.audit.record(
                "access.denied",
                {
                    "party": "key_authority",
                    "op": "plan",
                    "round_id": round_id,
                    "code": exc.code,
                    "reason": str(exc),
                },
            )

    def _moment_matrix(self, values: np.ndarray, count: int) -> np.ndarray:
        pairs = values.size
        classes = int((np.sqrt(8 * pairs + 1) - 1) // 2)
        preset = self._keys().public_context.preset
        return moment_matrix(values, preset=preset, count=count, num_classes=classes)

    def _verify(
        self, request: bytes, verifier: RequestVerifier | None = None, *, op: str = "decrypt"
    ) -> VerifiedRequest:
        """Check the aggregator's signature, binding and freshness; audit a refusal."""
        verifier = self._verifier if verifier is None else verifier
        try:
            if verifier is None:
                raise ServerRequestUnauthenticated("no aggregator key is enrolled")
            return verifier.verify(request, max_bytes=self.max_request_bytes)
        except (ServerRequestUnauthenticated, ServerRequestReplayed) as exc:
            self._denied(exc, op=op)
            raise

    def _denied(
        self, exc: ServerRequestUnauthenticated | ServerRequestReplayed, *, op: str
    ) -> None:
        _log.warning("key authority refused an unauthenticated %s request: %s", op, exc)
        if self.audit is not None:
            self.audit.record(
                "access.denied",
                {"party": "key_authority", "op": op, "code": exc.code, "reason": str(exc)},
            )

    def _ask(
        self, payload: bytes, round_id: int, purpose: str, ids: list[str], shape: tuple[int, int]
    ) -> ReleaseRequest:
        found = claimed_kind(payload)
        if found is None:
            raise AuthorityRequestMalformed("payload is not a CKKS ciphertext (header)")
        value_kind, counted = found
        return ReleaseRequest(
            round_id=round_id,
            purpose=purpose,
            contributors=tuple(ids),
            value_kind=value_kind,
            shape=(1,) if purpose in SCALAR_PURPOSES else shape,
            counted=counted,
        )

    def _deny(self, ask: ReleaseRequest, reason: str, error: type[DecryptionRefused]) -> None:
        if self.audit is not None:
            self.audit.record(
                "access.denied",
                {
                    "party": "key_authority",
                    "round_id": ask.round_id,
                    "purpose": ask.purpose,
                    "code": error.code,
                    "reason": reason,
                },
            )
        raise error(f"round {ask.round_id}, {ask.purpose}: {reason}")

    def _release_step(self, ask: ReleaseRequest) -> str:
        """Return the plan step ``ask`` is (the plan accepted it); refuse a mis-shaped moment.

        Only the publication may open a first-order ``(N, C)`` matrix: a moments
        request must carry the ``C(C+1)/2`` slot-summed products, so the published
        aggregate's ciphertext cannot be opened as "moments" (unnoised).
        """
        tracker = self.plans.tracker(ask.round_id)
        step = tracker.step_of(ask) if tracker is not None else None
        if tracker is None or step is None:
            self._deny(ask, "the request is no step of the round's plan", DecryptionRefused)
            raise AssertionError  # unreachable: _deny raises
        classes = tracker.plan.num_classes
        if step == "moments" and ask.shape != (1, classes * (classes + 1) // 2):
            self._deny(
                ask,
                f"moments are {classes * (classes + 1) // 2} sums, not {ask.shape}",
                DecryptionRefused,
            )
        return step

    @property
    def release_limit(self) -> int:
        """Ciphertexts this epoch may release: ``max_releases``, else the preset's sized ``t``."""
        return self.release_limit_of(self._keys())

    def release_limit_of(self, keys: KeyAuthorityKeys) -> int:
        """Ciphertexts ``keys`` (either epoch) may release: its sized ``t`` or ``max_releases``."""
        sized = keys.preset.max_decryptions
        return sized if self.max_releases is None else min(self.max_releases, sized)

    def _check_epoch(self, ask: ReleaseRequest, keys: KeyAuthorityKeys) -> None:
        limit = self.release_limit_of(keys)
        if keys.releases >= limit:
            reason = (
                f"key epoch {keys.fingerprint.hex()[:16]} released {keys.releases} of "
                f"{limit} decryptions; rotate the keys"
            )
            self._deny(ask, reason, KeyEpochExhausted)

    def _journal(
        self,
        verified: VerifiedRequest,
        claim: dict[str, object],
        *,
        granted: bool,
        reason: str | None = None,
    ) -> None:
        self.requests.append(
            SignedRequestRecord(
                round_id=verified.round_id,
                purpose=verified.purpose,
                request_sm3=verified.request_sm3,
                signer=verified.signer,
                nonce=verified.nonce,
                signed_header=verified.signed_header,
                signature=verified.signature,
                claim=claim,
                ciphertext_sm3=ciphertext_sm3(verified.header),
                granted=granted,
                reason=reason,
            )
        )

    def _check_witness(self, ask: ReleaseRequest, step: str, witness: bytes | None) -> None:
        """Require the scoring-epoch witness on a two-epoch publication, and only there."""
        if step == "publication" and self.publication_keys is not None and witness is None:
            self._deny(
                ask,
                "the publication carries no witness of the scored values",
                PublicationInconsistent,
            )
        if witness is not None and (step != "publication" or self.publication_keys is None):
            self._deny(ask, "only a two-epoch publication carries a witness", DecryptionRefused)

    def _decrypt_checked(
        self, payload: bytes, witness: bytes, shape: tuple[int, int], keys: KeyAuthorityKeys
    ) -> np.ndarray:
        """Decrypt a publication and its witness; release it only if they agree."""
        scoring = self._keys()
        publication = self._load_counted(payload, "aggregate", shape, keys)
        scored = self._load_counted(witness, "aggregate", shape, scoring)
        return decrypt_checked_publication(
            keys,
            publication,
            witness_keys=scoring,
            witness=scored,
            min_contributors=self.min_participants,
        )

    def _load_counted(
        self, payload: bytes, kind: str, shape: tuple[int, int], keys: KeyAuthorityKeys
    ) -> EncryptedMatrix:
        """Parse ``payload`` under ``keys``; refuse it if its ciphertexts would cross the limit."""
        try:
            matrix = load_encrypted(
                keys.public_context,
                payload,
                kind="score" if kind == "score" else "aggregate",
                n_samples=shape[0],
                n_classes=shape[1],
            )
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"ciphertext refused: {exc}") from exc
        limit = self.release_limit_of(keys)
        if keys.releases + len(matrix.vectors) > limit:
            raise ReleaseLimitReached(
                f"key epoch {keys.fingerprint.hex()[:16]} released {keys.releases} of "
                f"{limit} decryptions; {len(matrix.vectors)} more are asked: rotate the keys"
            )
        return matrix

    def _decrypt(
        self, payload: bytes, kind: str, shape: tuple[int, int], keys: KeyAuthorityKeys
    ) -> np.ndarray:
        """Parse and decrypt, under ``keys``, a ciphertext whose kind the policy accepted."""
        matrix = self._load_counted(payload, kind, shape, keys)
        if kind == "score":
            return np.array([decrypt_score(keys, matrix)])
        return decrypt_aggregate(keys, matrix, min_contributors=self.min_participants)

    def _emit(
        self,
        event: str,
        round_id: int,
        purpose: str,
        shape: tuple[int, ...],
        ids: Sequence[str],
        *,
        dp: bool = False,
        signed: dict[str, object] | None = None,
    ) -> None:
        if self.audit is not None:
            self.audit.record(
                event,
                {
                    "party": "key_authority",
                    "round_id": round_id,
                    "purpose": purpose,
                    "shape": list(shape),
                    "contributors": len(ids),
                    "participant_ids": list(ids),
                    "central_dp": dp,
                    **(signed or {}),
                },
            )

    def _central_noise(
        self, values: np.ndarray, ids: Sequence[str], header: dict[str, object], round_id: int
    ) -> np.ndarray:
        dp, gate = self.central_dp, self.budget
        tracker = self.plans.tracker(round_id)
        assert dp is not None and gate is not None and tracker is not None
        # the cap is the plan's (its weights were checked against it); the bound the
        # configured one when set, else the request's (never below the configured caps)
        bound = dp.bound if dp.bound is not None else number_from_wire(header.get("bound"))
        max_weight = tracker.plan.max_weight
        sens = central_sensitivity(size=values.size, bound=bound, max_weight=max_weight)
        return add_central_noise(
            values, dp=dp, gate=gate, participant_ids=ids, sensitivity=sens, round_id=round_id
        )

    # -- shares mode: Beaver triples ------------------------------------------------


def _parse_request(header: dict[str, object]) -> tuple[int, str, list[str], tuple[int, int]]:
    round_id, purpose = header.get("round_id"), header.get("purpose")
    ids, shape = header.get("participant_ids"), header.get("shape")
    if isinstance(round_id, bool) or not isinstance(round_id, int) or round_id < 0:
        raise AuthorityRequestMalformed("request needs an integer round_id >= 0")
    if purpose not in PURPOSES:
        raise AuthorityRequestMalformed(f"purpose {purpose!r} is unknown; allowed: {PURPOSES}")
    if not isinstance(ids, list) or not ids or not all(isinstance(p, str) for p in ids):
        raise AuthorityRequestMalformed("request needs a non-empty participant_ids list")
    if (
        not isinstance(shape, list)
        or len(shape) != 2
        or not all(isinstance(s, int) and s >= 1 for s in shape)
    ):
        raise AuthorityRequestMalformed(f"request shape must be [rows, cols], got {shape!r}")
    return round_id, str(purpose), list(ids), (shape[0], shape[1])


def plan_fields(claim: Mapping[str, object]) -> dict[str, object]:
    """Return the release-plan fields a claim states (step, roster, centre, rows, W, slice).

    Raises
    ------
    AuthorityRequestMalformed
        If a field is present but malformed.
    """
    out: dict[str, object] = {}
    try:
        if isinstance(claim.get("step"), str):
            out["step"] = claim["step"]
        for name in ("roster", "centre"):
            raw = claim.get(name)
            if isinstance(raw, list):
                out[name] = tuple(str(u[0] if isinstance(u, list) else u) for u in raw)
        if "centre" in claim and isinstance(claim.get("samples"), int):
            out["samples"] = claim["samples"]
        if "centre" in claim and claim.get("op") == "score":
            rows = claim["whitening"]
            out["whitening"] = tuple(tuple(_float(v) for v in row) for row in rows)  # type: ignore[attr-defined]
        if claim.get("op") == "weighted_sum":
            out["weights"] = tuple(_float(w) for w in claim["weights"])  # type: ignore[attr-defined]
        out.update(claim_plan_fields(claim))  # an evidence claim's slice and rows
    except (TypeError, KeyError, IndexError) as exc:
        raise AuthorityRequestMalformed(f"claim plan fields refused: {exc}") from exc
    return out


def _float(value: object) -> float:
    number = value if isinstance(value, float) else number_from_wire(value)
    if number is None:
        raise AuthorityRequestMalformed(f"claim number {value!r} is not an exact decimal")
    return float(number)


def _signed_fields(verified: VerifiedRequest, claim: dict[str, object]) -> dict[str, object]:
    """Audit fields of a signed request: enough to check the signature and recompute."""
    return {
        "request_sm3": verified.request_sm3,
        "signer": verified.signer,
        "nonce": verified.nonce,
        "signed_header": verified.signed_header.decode("utf-8"),
        "signature": verified.signature.hex(),
        "ciphertext_sm3": ciphertext_sm3(verified.header),
        **({"epoch": verified.header["epoch"]} if "epoch" in verified.header else {}),
    }


def decryption_request(
    *,
    round_id: int,
    purpose: str,
    participant_ids: Sequence[str],
    shape: tuple[int, int],
    ciphertext: bytes,
    signer: Signer,
    claim: dict[str, object],
    **extra: object,
) -> bytes:
    """Build the bytes of a decryption request, signed by the aggregator.

    ``claim`` says how the ciphertext was computed (:mod:`secure_fed.secure.ckks_claims`).
    """
    header: dict[str, object] = {
        "round_id": round_id,
        "purpose": purpose,
        "participant_ids": list(participant_ids),
        "shape": list(shape),
        "claim": claim,
    }
    header.update(extra)
    return authenticate_request(
        KEY_AUTHORITY_REQUEST,
        header,
        ciphertext,
        signer=signer,
        round_id=round_id,
        purpose=purpose,
    )


def plan_request(plan: ReleasePlan, *, signer: Signer) -> bytes:
    """Build the bytes of a signed request fixing ``plan`` (purpose ``"plan"``, its round)."""
    header: dict[str, object] = {"round_id": plan.round_id, "purpose": "plan"}
    return authenticate_request(
        KEY_AUTHORITY_REQUEST,
        header,
        plan.to_bytes(),
        signer=signer,
        round_id=plan.round_id,
        purpose="plan",
    )
