"""The shares-mode helper: holds party 1's share of every upload (a 32-byte PRG seed).

The helper may learn what the aggregator learns and nothing more. It receives
each participant's seed sealed with SM4-GCM under a key it shares with that
participant (forwarded by the aggregator, which cannot read it), verifies the
HMAC-SM3 tag of the share frame, and then runs the same local steps as the
aggregator (:mod:`secure_fed.secure.computation.share_ops`) on its own shares.

It is also a gatekeeper of openings, under the same
:class:`~secure_fed.secure.release_policy.ReleasePolicy` as the key authority
and the round's :class:`~secure_fed.secure.release_plan.ReleasePlan`, and it
holds against one malicious aggregator: it derives every input of an opening
from its own view and the plan. The contributors come from the uploads it
holds (never from labels in the request; two uploads of one participant count
once and are refused); the row count from the plan; the centre is its own
share of the hidden mean of the plan's set (``m x_k - sum_j x_j``); the
whitening comes from the covariance it helped open (openings are symmetric:
it learns every value it helps open and runs the plan's state machine on
them); publication weights must lie between the codec's resolution and the
plan's cap. A request that carries a centre, a whitening matrix, a row count
or fixed-point parameters is refused. Each Beaver-triple label is used once
(:class:`~secure_fed.secure.parties.registry.HelperRegistry`, persisted), and
each upload belongs to one round. Every release is a row of :attr:`HelperParty.log` and a
``decryption.released`` audit event (``party: helper``); refusals raise
:class:`~secure_fed.errors.OpeningRefused` with an ``access.denied`` event.
Beaver openings (``x - a``) are uniformly masked and reveal nothing (Beaver,
CRYPTO 1991). At the plan's ``copies`` step (op ``copies``) the helper computes
each pair's distance as shares, compares it with the threshold it derives
itself and counts on shares; only the near-duplicate counts are opened
(:mod:`secure_fed.secure.computation.share_copies`); a distance is never opened, under
any operation. Requests and replies are
``helper_request`` / ``helper_reply`` frames of :mod:`secure_fed.wire`; every
request (plan, load, range, linear, open, finish, evidence, copies) is
HMAC-SM3-tagged by the aggregator under the channel key (:func:`helper_request`,
:mod:`secure_fed.secure.server_auth`), bound to its operation, round and a fresh
nonce: an unsigned, altered, re-targeted or replayed request is refused before
the operation runs.

This module holds the helper's configuration, request dispatch and verification,
and plans; its uploads are :mod:`secure_fed.secure.parties.helper_uploads`, its
openings :mod:`secure_fed.secure.parties.helper_openings` (linear, evidence) and
:mod:`secure_fed.secure.parties.helper_beaver` (Beaver products), its copies step
:mod:`secure_fed.secure.parties.helper_copies`, and each request is parsed once by
:mod:`secure_fed.secure.protocol.helper_requests` or
:mod:`secure_fed.secure.protocol.helper_step_requests`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from crypto.shares import ShareBundle, ShareMacKey
from crypto.shares.mac import MacKeyShare, MacOpening
from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    OpeningRefused,
    PlanOutsidePolicy,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
    SharesOpeningForged,
    UploadMalformed,
)
from secure_fed.secure.audit import AuditSink, record_plan_installed
from secure_fed.secure.computation.share_range import HelperRangeChecks
from secure_fed.secure.consortium_checks import check_consortium
from secure_fed.secure.consortium_policy import PolicyPin
from secure_fed.secure.parties.helper_beaver import BeaverMachine, _Pending
from secure_fed.secure.parties.helper_copies import CopiesRun, Reply
from secure_fed.secure.parties.helper_uploads import HelperUploads
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.protocol.codecs import wire_int
from secure_fed.secure.protocol.helper_requests import (
    LinearRequest,
    MacCheckRequest,
    parse_op,
)
from secure_fed.secure.protocol.helper_step_requests import (
    CopiesRequest,
    EvidenceRequest,
    FinishRequest,
    OpenRequest,
)
from secure_fed.secure.protocol.helper_wire import (
    helper_request,
    plan_request,
    reply_array,
    seal_key,
)
from secure_fed.secure.protocol.vocabulary import (
    AuditEvent,
    Channel,
    HelperOp,
    Key,
    Party,
)
from secure_fed.secure.release_plan import PlanBook, PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import (
    DecryptionRecord,
    ReleasePolicy,
    ReleaseRequest,
    ReleaseRule,
)
from secure_fed.secure.server_auth import (
    ChannelKey,
    FreshnessStore,
    RequestVerifier,
)
from secure_fed.secure.upload_notices import NoticeBook
from secure_fed.wire import (
    HELPER_REPLY,
    HELPER_REQUEST,
    decode_frame,
    encode_frame,
)

__all__ = [
    "HelperParty",
    "helper_request",
    "plan_request",
    "reply_array",
    "seal_key",
]

_log = logging.getLogger(__name__)


@dataclass
class HelperParty(HelperUploads, BeaverMachine):
    """Party 1 of the shares mode; talks to the aggregator in bytes (:meth:`handle`).

    Parameters
    ----------
    shape
        ``(N_pub, C)`` of every upload.
    min_participants
        Smallest participant set whose aggregate the helper helps open (>= 2).
    secrets
        Enrolment secret per participant id (shared with that participant only).
    dealer_key
        MAC key of the key authority's triple blobs to the helper.
    channel_key
        MAC key of the aggregator-helper channel (Beaver openings).
    audit
        Sink of ``decryption.released`` and ``access.denied`` events.
    release_rules
        Extra release rules, after the built-in ones and the round's plan.
    registry
        Used triple labels and upload rounds (persist it in a file the helper owns).
    request_key
        HMAC-SM3 key of the aggregator's signed requests (:mod:`..server_auth`);
        every operation is served only for a request tagged with it (without
        one, every request is refused).
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
        The consortium's signed policy as this helper pinned it
        (:class:`~secure_fed.secure.consortium_policy.PolicyPin`): a plan outside
        it is refused (``PLAN_OUTSIDE_POLICY``, audited). Its quorum, participants
        and shape must be the helper's.
    mac_key
        The helper's share of the MAC keys (authenticated shares,
        :mod:`crypto.shares.mac`); ``None``: shares are not authenticated. With it,
        every upload is a masked ``x - r`` whose mask shares the helper derives from
        ``mask_secret`` (shared with the dealer only), and every linear opening is
        MAC-checked before the helper releases it; a failed check aborts the round
        (``SHARES_OPENING_FORGED``, audited, every later opening of it refused).
    mask_secret
        The secret the helper shares with the dealer (input masks).
    """

    shape: tuple[int, int]
    min_participants: int
    secrets: dict[str, bytes]
    dealer_key: ShareMacKey
    channel_key: ShareMacKey
    audit: AuditSink | None = None
    release_rules: tuple[ReleaseRule, ...] = ()
    registry: HelperRegistry = field(default_factory=HelperRegistry)
    request_key: ChannelKey | None = field(default=None, repr=False)
    nonces: FreshnessStore | None = field(default=None, repr=False)
    plan_journal: PlanJournal | None = field(default=None, repr=False)
    consortium: PolicyPin | None = field(default=None, repr=False)
    mac_key: MacKeyShare | None = field(default=None, repr=False)
    mask_secret: bytes | None = field(default=None, repr=False)
    log: list[DecryptionRecord] = field(default_factory=list)
    policy: ReleasePolicy = field(init=False, repr=False)
    plans: PlanBook = field(init=False, repr=False)
    notices: NoticeBook = field(init=False, repr=False)
    _seeds: dict[str, tuple[str, ShareBundle]] = field(default_factory=dict, repr=False)
    _pending: dict[str, _Pending] = field(default_factory=dict, repr=False)
    _copies_runs: dict[str, CopiesRun] = field(default_factory=dict, repr=False)
    _round_uploads: dict[int, dict[str, str]] = field(default_factory=dict, repr=False)
    _mac_shares: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _mac_openings: dict[
        tuple[int, str], tuple[MacOpening, list[tuple[ReleaseRequest, np.ndarray | None]]]
    ] = field(default_factory=dict, repr=False)
    _forged_rounds: set[int] = field(default_factory=set, repr=False)
    range_checks: HelperRangeChecks = field(default_factory=HelperRangeChecks, repr=False)
    _plan_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)
    _op_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)
    _upload_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if (self.mac_key is None) != (self.mask_secret is None):
            raise ModeSetupInvalid("mac_key and mask_secret come together (authenticated shares)")
        if self.mac_key is not None and self.mac_key.party != 1:
            raise ModeSetupInvalid("the helper holds party 1's MAC key share")
        if self.request_key is not None:
            key, store = self.request_key, self.nonces
            self._plan_verifier = RequestVerifier(
                HELPER_REQUEST, key, store=store, channel=Channel.PLAN
            )
            self._op_verifier = RequestVerifier(
                HELPER_REQUEST, key, store=store, channel=Channel.OPS
            )
            self._upload_verifier = RequestVerifier(
                HELPER_REQUEST, key, any_round=True, store=store, channel=Channel.UPLOADS
            )
        shape = (self.shape[0], self.shape[1])
        if self.consortium is not None:
            check_consortium(self.consortium, self.min_participants, frozenset(self.secrets), shape)
        self.plans = PlanBook(
            min_participants=self.min_participants,
            enrolled=frozenset(self.secrets),
            shape=shape,
            journal=self.plan_journal,
            policy=self.consortium,
        )
        # participants' signed upload notices: a roster may not leave a noticed one out
        self.notices = NoticeBook(
            party=Party.HELPER,
            plans=self.plans,
            keys=None if self.consortium is None else self.consortium.participant_keys,
            journal=self.plan_journal,
            audit=self.audit,
        )
        self.policy = ReleasePolicy(
            party=Party.HELPER,
            min_participants=self.min_participants,
            refusal=OpeningRefused,
            audit=self.audit,
            log=self.log,
            rules=(self.plans, *self.release_rules),
        )

    def accept_notice(self, notice: bytes) -> bytes:
        """Record a participant's signed upload notice; return the acknowledgement.

        See :class:`~secure_fed.secure.upload_notices.NoticeBook` (refusals are typed,
        audited and record nothing).
        """
        return self.notices.accept(notice)

    def handle(self, request: bytes) -> bytes:
        """Serve one aggregator request.

        Raises
        ------
        AuthorityRequestMalformed, UploadMalformed, OpeningRefused
            On a malformed frame, a refused seed, or an opening the policy refuses;
            an authenticated request refused as malformed (a missing or mistyped
            field, another count of payload parts) is an ``access.denied`` event
            naming its operation and the reason, and changes nothing.
        ServerRequestUnauthenticated, ServerRequestReplayed
            A request (any operation) not tagged with the aggregator's channel key,
            signed for another operation or round, altered, or replayed (an
            ``access.denied`` event).
        """
        header, _ = decode_frame(request, HELPER_REQUEST)
        ops: dict[HelperOp, Callable[[dict[str, object], bytes], Reply]] = {
            HelperOp.LOAD: self._load,
            HelperOp.RANGE: lambda h, p: self.range_checks.handle(
                h, p, seeds=self._seeds, dealer_key=self.dealer_key, channel_key=self.channel_key
            ),
            HelperOp.LINEAR: lambda h, p: self._linear(LinearRequest.from_wire(h, p)),
            HelperOp.MAC_CHECK: lambda h, p: self._mac_check(MacCheckRequest.from_wire(h)),
            HelperOp.OPEN: lambda h, p: self._open(OpenRequest.from_wire(h, p)),
            HelperOp.FINISH: lambda h, p: self._finish(FinishRequest.from_wire(h, p)),
            HelperOp.EVIDENCE: lambda h, p: self._evidence(EvidenceRequest.from_wire(h, p)),
            HelperOp.COPIES: lambda h, p: self._copies(CopiesRequest.from_wire(h, p)),
        }
        op = parse_op(header)
        header, payload = self._verify(request, op)
        if op == HelperOp.PLAN:  # audits its own refusals
            reply_header, reply = self._plan(header, payload)
            return encode_frame(HELPER_REPLY, reply_header, reply)
        round_id = header.get(Key.ROUND_ID)
        if op not in (HelperOp.LOAD, HelperOp.RANGE) and round_id in self._forged_rounds:
            raise SharesOpeningForged(f"round {round_id} aborted on a failed MAC check")
        try:
            reply_header, reply = ops[op](header, payload)
        except (AuthorityRequestMalformed, UploadMalformed) as exc:
            self._malformed(op, exc, str(exc))
            raise
        return encode_frame(HELPER_REPLY, reply_header, reply)

    def _malformed(
        self, op: str, exc: AuthorityRequestMalformed | UploadMalformed, reason: str
    ) -> None:
        """Audit an authenticated request refused as malformed (``access.denied``, its op)."""
        _log.warning("helper refused a malformed %s request: %s", op, exc)
        if self.audit is not None:
            self.audit.record(
                AuditEvent.ACCESS_DENIED,
                {"party": Party.HELPER, "op": op, "code": exc.code, "reason": reason},
            )

    # -- the round's plan ------------------------------------------------------------

    def _verify(self, request: bytes, op: str) -> tuple[dict[str, object], bytes]:
        """Check the request's tag, that its signed purpose is ``op``, and freshness.

        Plans have their own freshness window (they are fixed ahead of a round's
        openings); the openings (linear, open, finish) share one, so a request of
        an older round than one already served, or a nonce seen in its round, is a
        replay; an upload's load and range check belong to no round (an aggregator
        restarted mid-round sends them again), so only their nonces are checked.
        A refusal is an ``access.denied`` event.
        """
        if op == HelperOp.PLAN:
            verifier = self._plan_verifier
        elif op in (HelperOp.LOAD, HelperOp.RANGE):
            verifier = self._upload_verifier
        else:
            verifier = self._op_verifier
        try:
            if verifier is None:
                raise ServerRequestUnauthenticated("no aggregator channel key is enrolled")
            verified = verifier.verify(request)
            # the op is a signed header field; the signed purpose is the header's
            # purpose (checked equal by the verifier) or, without one, the op
            if verified.purpose != verified.header.get(Key.PURPOSE, op) or (
                op == HelperOp.PLAN and verified.purpose != HelperOp.PLAN
            ):
                raise ServerRequestUnauthenticated(
                    f"the request is signed for {verified.purpose!r}, not {op!r}"
                )
        except (ServerRequestUnauthenticated, ServerRequestReplayed) as exc:
            _log.warning("helper refused an unauthenticated %s request: %s", op, exc)
            if self.audit is not None:
                self.audit.record(
                    AuditEvent.ACCESS_DENIED,
                    {"party": Party.HELPER, "op": op, "code": exc.code, "reason": str(exc)},
                )
            raise
        return verified.header, verified.payload

    def _plan(self, header: dict[str, object], payload: bytes) -> Reply:
        """Fix a round's release plan (once, before anything of the round is opened)."""
        try:
            round_id = wire_int(header, Key.ROUND_ID)
            plan = ReleasePlan.from_bytes(payload)
            if plan.round_id != round_id or plan.num_samples != self.shape[0]:
                raise ModeSetupInvalid("the plan names another round or upload shape")
            if plan.num_classes != self.shape[1]:
                raise ModeSetupInvalid("the plan names another upload shape")
            fresh = plan.round_id not in self.plans.trackers
            fixed = self.plans.install(plan).plan
        except PlanOutsidePolicy as exc:
            if self.audit is not None:
                self.audit.record(
                    AuditEvent.ACCESS_DENIED,
                    {
                        "party": Party.HELPER,
                        "op": HelperOp.PLAN,
                        "code": exc.code,
                        "reason": str(exc),
                    },
                )
            raise
        except ModeSetupInvalid as exc:
            refused = AuthorityRequestMalformed(f"release plan refused: {exc}")
            self._malformed(HelperOp.PLAN, refused, str(exc))
            raise refused from exc
        except AuthorityRequestMalformed as exc:
            self._malformed(HelperOp.PLAN, exc, str(exc))
            raise
        if fresh:  # a resent identical plan changes nothing and is not recorded again
            auth = header.get(Key.AUTH)
            signed = {k: auth.get(k) for k in ("signer", "nonce")} if isinstance(auth, dict) else {}
            record_plan_installed(
                self.audit,
                party=Party.HELPER,
                plan_bytes=fixed.to_bytes(),
                participants=frozenset(self.secrets),
                request=signed,
            )
        return {Key.OK: True, Key.ROUND_ID: plan.round_id}, fixed.to_bytes()

    def _tracker(self, ask: ReleaseRequest) -> PlanTracker:
        tracker = self.plans.tracker(ask.round_id)
        if tracker is None:
            self.policy.refuse(ask, f"no release plan was fixed for round {ask.round_id}")
        return tracker
