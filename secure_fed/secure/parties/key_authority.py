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

The decryption service is :mod:`secure_fed.secure.parties.decryption` (its checks
:mod:`secure_fed.secure.parties.decryption_checks`), the dealing
:mod:`secure_fed.secure.parties.dealer`; this module holds the authority's
configuration, keys, request verifiers and plan installation. Requests are
parsed by :mod:`secure_fed.secure.protocol.authority_requests`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from crypto.ckks import (
    KeyAuthorityKeys,
    generate_keys,
)
from secure_fed.errors import (
    AuthorityRequestMalformed,
    DecryptionRefused,
    KeyAuthorityConfigInvalid,
    ModeSetupInvalid,
    ReleaseRefused,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
)
from secure_fed.secure.audit import AuditSink, record_plan_installed
from secure_fed.secure.consortium_checks import check_consortium
from secure_fed.secure.consortium_policy import PolicyPin
from secure_fed.secure.parties.central_dp import (
    CentralDP,
    ChargeGate,
)
from secure_fed.secure.parties.dealer import Dealer
from secure_fed.secure.parties.decryption import DecryptionService, plan_fields
from secure_fed.secure.parties.decryption_log import SignedRequestRecord
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.protocol.authority_requests import (
    compare_request,
    deal_request,
    decryption_request,
    plan_request,
)
from secure_fed.secure.protocol.vocabulary import (
    AuditEvent,
    AuthorityOp,
    Channel,
    Party,
)
from secure_fed.secure.release_plan import PlanBook, ReleasePlan
from secure_fed.secure.release_policy import (
    AGGREGATE_PURPOSES,
    DecryptionRecord,
    ReleasePolicy,
    ReleaseRule,
)
from secure_fed.secure.server_auth import (
    FreshnessStore,
    RequestVerifier,
    ServerIdentity,
    VerifiedRequest,
)
from secure_fed.secure.upload_notices import NoticeBook
from secure_fed.wire import (
    KEY_AUTHORITY_REQUEST,
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
    "plan_fields",
    "plan_request",
]

_log = logging.getLogger(__name__)

#: Decrypted ciphertexts one key epoch may release when ``max_releases`` is not set:
#: the preset's ``max_decryptions`` (the ``t`` its flooding is sized for); then rotate.
DEFAULT_MAX_RELEASES: int | None = None


@dataclass
class KeyAuthority(Dealer, DecryptionService):
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
    verifier
        The enrolled verifier's SM2 identity (:mod:`secure_fed.secure.verifier`):
        every decryption request then needs its attestation that the ciphertext is
        the claim recomputed from the participants' signed uploads, checked before
        anything is decrypted (``KEY_AUTHORITY_RELEASE_UNATTESTED``). ``None``: no
        verifier, forgeries are only detected afterwards (:mod:`secure_fed.secure.recompute`).
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
    verifier: ServerIdentity | None = None
    log: list[DecryptionRecord] = field(default_factory=list)
    requests: list[SignedRequestRecord] = field(default_factory=list)
    policy: ReleasePolicy = field(init=False, repr=False)
    plans: PlanBook = field(init=False, repr=False)
    notices: NoticeBook = field(init=False, repr=False)
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
            self._verifier = RequestVerifier(kind, sender, store=store, channel=Channel.DECRYPT)
            # plans are fixed ahead of a round's decryptions: their own freshness window
            self._plan_verifier = RequestVerifier(kind, sender, store=store, channel=Channel.PLAN)
            # range checks run at an upload's load, which belongs to no round of its own
            self._range_verifier = RequestVerifier(
                kind, sender, any_round=True, store=store, channel=Channel.RANGE
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
        # participants' signed upload notices: a roster may not leave a noticed one out
        self.notices = NoticeBook(
            party=Party.KEY_AUTHORITY,
            plans=self.plans,
            keys=None if self.consortium is None else self.consortium.participant_keys,
            journal=self.plan_journal,
            audit=self.audit,
        )
        self.policy = ReleasePolicy(
            party=Party.KEY_AUTHORITY,
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
                AuditEvent.KEY_GENERATED,
                {"kind": "ckks", "preset": preset, "fingerprint": ka.keys.fingerprint.hex()},
            )
            if pub is not None:
                fields = {"kind": "ckks", "preset": publication_preset, "role": "publication"}
                ka.audit.record(
                    AuditEvent.KEY_GENERATED, {**fields, "fingerprint": pub.fingerprint.hex()}
                )
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

    def accept_notice(self, notice: bytes) -> bytes:
        """Record a participant's signed upload notice; return the acknowledgement.

        See :class:`~secure_fed.secure.upload_notices.NoticeBook` (refusals are typed,
        audited and record nothing).
        """
        return self.notices.accept(notice)

    def install_plan(self, request: bytes) -> bytes:
        """Fix a round's release plan from a signed request; return the plan as fixed.

        ``request`` is built by :func:`plan_request` with the enrolled aggregator's
        key (purpose ``"plan"``, the plan's round); the aggregator adopts the reply.

        Raises
        ------
        ServerRequestUnauthenticated, ServerRequestReplayed
            Not signed by the enrolled aggregator, altered, for another purpose or
            round than its plan, or replayed (an ``access.denied`` event).
        AuthorityRequestMalformed
            A signed plan that does not parse or validate
            (:meth:`ReleasePlan.from_bytes`; an ``access.denied`` event, op
            ``plan``, with the reason, as the helper records it).
        ModeSetupInvalid
            A second plan for the round, or one outside this authority's bounds
            (a lower ``min_participants`` is raised to its own; audited).
        """
        verified = self._verify(request, self._plan_verifier, op=AuthorityOp.PLAN)
        try:
            if verified.purpose != AuthorityOp.PLAN:
                raise ServerRequestUnauthenticated(f"purpose {verified.purpose!r} is not 'plan'")
            try:
                plan = ReleasePlan.from_bytes(verified.payload)
            except ModeSetupInvalid as exc:  # as the helper refuses it: a malformed request
                raise AuthorityRequestMalformed(f"release plan refused: {exc}") from exc
            if plan.round_id != verified.round_id:
                raise ServerRequestUnauthenticated(
                    f"the plan names round {plan.round_id}, the request round {verified.round_id}"
                )
        except (ServerRequestUnauthenticated, AuthorityRequestMalformed) as exc:
            self._denied(exc, op=AuthorityOp.PLAN)
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
                party=Party.KEY_AUTHORITY,
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
                AuditEvent.ACCESS_DENIED,
                {
                    "party": Party.KEY_AUTHORITY,
                    "op": AuthorityOp.PLAN,
                    "round_id": round_id,
                    "code": exc.code,
                    "reason": str(exc),
                },
            )

    def _verify(
        self,
        request: bytes,
        verifier: RequestVerifier | None = None,
        *,
        op: str = AuthorityOp.DECRYPT,
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

    def _denied(self, exc: ReleaseRefused, *, op: str) -> None:
        """Audit a refused request (unauthenticated, replayed or malformed) of ``op``."""
        _log.warning("key authority refused a %s request: %s", op, exc)
        if self.audit is not None:
            self.audit.record(
                AuditEvent.ACCESS_DENIED,
                {"party": Party.KEY_AUTHORITY, "op": op, "code": exc.code, "reason": str(exc)},
            )
