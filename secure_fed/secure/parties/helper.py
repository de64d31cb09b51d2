"""The shares-mode helper: holds party 1's share of every upload (a 32-byte PRG seed).

The helper may learn what the aggregator learns and nothing more. It receives
each participant's seed sealed with SM4-GCM under a key it shares with that
participant (forwarded by the aggregator, which cannot read it), verifies the
HMAC-SM3 tag of the share frame, and then runs the same local steps as the
aggregator (:mod:`secure_fed.secure.modes.share_ops`) on its own shares.

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
(:mod:`secure_fed.secure.modes.share_copies`); a distance is never opened, under
any operation. Requests and replies are
``helper_request`` / ``helper_reply`` frames of :mod:`secure_fed.wire`; every
request (plan, load, range, linear, open, finish, evidence, copies) is
HMAC-SM3-tagged by the aggregator under the channel key (:func:`helper_request`,
:mod:`secure_fed.secure.server_auth`), bound to its operation, round and a fresh
nonce: an unsigned, altered, re-targeted or replayed request is refused before
the operation runs.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from crypto.errors import CryptoError
from crypto.shares import (
    BeaverParty,
    ShareBundle,
    ShareLabel,
    ShareMacKey,
    TripleShare,
)
from crypto.sm import SM4GCM
from secure_fed.errors import (
    AuthorityRequestMalformed,
    ModeSetupInvalid,
    OpeningRefused,
    PlanOutsidePolicy,
    ServerRequestReplayed,
    ServerRequestUnauthenticated,
    UploadMalformed,
)
from secure_fed.secure.audit import AuditSink, record_plan_installed
from secure_fed.secure.consortium_policy import PolicyPin, check_consortium
from secure_fed.secure.modes.evidence import evidence_sums, open_sums, slice_from_fields
from secure_fed.secure.modes.share_ops import (
    CODEC,
    centred_difference,
    check_moment_room,
    moment_sums,
    pair_factors,
    score_plan,
    score_sums,
    weighted_share,
    whiten_shares,
)
from secure_fed.secure.modes.share_range import (
    HelperRangeChecks,
)
from secure_fed.secure.parties.helper_copies import (
    DERIVED_FIELDS,
    CopiesMachine,
    CopiesRun,
    Reply,
    _int,
    split_parts,
)
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.release_plan import PlanBook, PlanTracker, ReleasePlan
from secure_fed.secure.release_policy import (
    DecryptionRecord,
    ReleasePolicy,
    ReleaseRequest,
    ReleaseRule,
)
from secure_fed.secure.scoring.mahalanobis import symmetric_from_pairs
from secure_fed.secure.server_auth import (
    ChannelKey,
    FreshnessStore,
    RequestVerifier,
    authenticate_request,
)
from secure_fed.wire import (
    HELPER_REPLY,
    HELPER_REQUEST,
    decode_array,
    decode_frame,
    encode_array,
    encode_frame,
    number_from_wire,
)

__all__ = [
    "HelperParty",
    "helper_request",
    "plan_request",
    "reply_array",
    "seal_key",
    "split_parts",
]

_log = logging.getLogger(__name__)

#: Purposes a linear opening may name (the plan refuses ``mean``: one publication per round).
LINEAR_PURPOSES = ("aggregate", "mean")
#: Beaver operations: the plan's two scoring passes and its one second moment.
BEAVER_KINDS = ("ranking", "final", "moments")
#: Names under which a Beaver or linear opening would open a pair distance itself.
DISTANCE_NAMES = ("distance", "copies")


def seal_key(secret: bytes) -> bytes:
    """SM4 key a participant and the helper derive from their enrolment secret."""
    return hmac.new(secret, b"secure-fed/shares/seed-seal/v1", "sm3").digest()[:16]


@dataclass
class _Pending:
    party: BeaverParty
    asks: list[ReleaseRequest]
    kind: str
    rows: int
    fz: int


@dataclass
class HelperParty(CopiesMachine):
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
    log: list[DecryptionRecord] = field(default_factory=list)
    policy: ReleasePolicy = field(init=False, repr=False)
    plans: PlanBook = field(init=False, repr=False)
    _seeds: dict[str, tuple[str, ShareBundle]] = field(default_factory=dict, repr=False)
    _pending: dict[str, _Pending] = field(default_factory=dict, repr=False)
    _copies_runs: dict[str, CopiesRun] = field(default_factory=dict, repr=False)
    _round_uploads: dict[int, dict[str, str]] = field(default_factory=dict, repr=False)
    range_checks: HelperRangeChecks = field(default_factory=HelperRangeChecks, repr=False)
    _plan_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)
    _op_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)
    _upload_verifier: RequestVerifier | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.request_key is not None:
            key, store = self.request_key, self.nonces
            self._plan_verifier = RequestVerifier(HELPER_REQUEST, key, store=store, channel="plan")
            self._op_verifier = RequestVerifier(HELPER_REQUEST, key, store=store, channel="ops")
            self._upload_verifier = RequestVerifier(
                HELPER_REQUEST, key, any_round=True, store=store, channel="uploads"
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
        self.policy = ReleasePolicy(
            party="helper",
            min_participants=self.min_participants,
            refusal=OpeningRefused,
            audit=self.audit,
            log=self.log,
            rules=(self.plans, *self.release_rules),
        )

    def handle(self, request: bytes) -> bytes:
        """Serve one aggregator request.

        Raises
        ------
        AuthorityRequestMalformed, UploadMalformed, OpeningRefused
            On a malformed frame, a refused seed, or an opening the policy refuses.
        ServerRequestUnauthenticated, ServerRequestReplayed
            A request (any operation) not tagged with the aggregator's channel key,
            signed for another operation or round, altered, or replayed (an
            ``access.denied`` event).
        """
        header, _ = decode_frame(request, HELPER_REQUEST)
        ops: dict[str, Callable[[dict[str, object], bytes], Reply]] = {
            "load": self._load,
            "range": lambda h, p: self.range_checks.handle(
                h, p, seeds=self._seeds, dealer_key=self.dealer_key, channel_key=self.channel_key
            ),
            "plan": self._plan,
            "linear": self._linear,
            "open": self._open,
            "finish": self._finish,
            "evidence": self._evidence,
            "copies": self._copies,
        }
        op = header.get("op")
        if not isinstance(op, str) or op not in ops:
            raise AuthorityRequestMalformed(f"helper op {op!r} is unknown; allowed: {sorted(ops)}")
        header, payload = self._verify(request, op)
        reply_header, reply = ops[op](header, payload)
        return encode_frame(HELPER_REPLY, reply_header, reply)

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
        if op == "plan":
            verifier = self._plan_verifier
        elif op in ("load", "range"):
            verifier = self._upload_verifier
        else:
            verifier = self._op_verifier
        try:
            if verifier is None:
                raise ServerRequestUnauthenticated("no aggregator channel key is enrolled")
            verified = verifier.verify(request)
            # the op is a signed header field; the signed purpose is the header's
            # purpose (checked equal by the verifier) or, without one, the op
            if verified.purpose != verified.header.get("purpose", op) or (
                op == "plan" and verified.purpose != "plan"
            ):
                raise ServerRequestUnauthenticated(
                    f"the request is signed for {verified.purpose!r}, not {op!r}"
                )
        except (ServerRequestUnauthenticated, ServerRequestReplayed) as exc:
            _log.warning("helper refused an unauthenticated %s request: %s", op, exc)
            if self.audit is not None:
                self.audit.record(
                    "access.denied",
                    {"party": "helper", "op": op, "code": exc.code, "reason": str(exc)},
                )
            raise
        return verified.header, verified.payload

    def _plan(self, header: dict[str, object], payload: bytes) -> Reply:
        """Fix a round's release plan (once, before anything of the round is opened)."""
        try:
            plan = ReleasePlan.from_bytes(payload)
            if plan.round_id != _int(header, "round_id") or plan.num_samples != self.shape[0]:
                raise ModeSetupInvalid("the plan names another round or upload shape")
            if plan.num_classes != self.shape[1]:
                raise ModeSetupInvalid("the plan names another upload shape")
            fresh = plan.round_id not in self.plans.trackers
            fixed = self.plans.install(plan).plan
        except PlanOutsidePolicy as exc:
            if self.audit is not None:
                self.audit.record(
                    "access.denied",
                    {"party": "helper", "op": "plan", "code": exc.code, "reason": str(exc)},
                )
            raise
        except ModeSetupInvalid as exc:
            refused = AuthorityRequestMalformed(f"release plan refused: {exc}")
            if self.audit is not None:
                self.audit.record(
                    "access.denied",
                    {"party": "helper", "op": "plan", "code": refused.code, "reason": str(exc)},
                )
            raise refused from exc
        if fresh:  # a resent identical plan changes nothing and is not recorded again
            auth = header.get("auth")
            signed = {k: auth.get(k) for k in ("signer", "nonce")} if isinstance(auth, dict) else {}
            record_plan_installed(
                self.audit,
                party="helper",
                plan_bytes=fixed.to_bytes(),
                participants=frozenset(self.secrets),
                request=signed,
            )
        return {"ok": True, "round_id": plan.round_id}, fixed.to_bytes()

    def _tracker(self, ask: ReleaseRequest) -> PlanTracker:
        tracker = self.plans.tracker(ask.round_id)
        if tracker is None:
            self.policy.refuse(ask, f"no release plan was fixed for round {ask.round_id}")
        return tracker

    def _bind(self, ask: ReleaseRequest, uids: list[str]) -> None:
        """Bind the uploads to the round: an upload is opened in one round only."""
        stale = [u for u in uids if not self.registry.bind_upload(u, ask.round_id)]
        if stale:
            self.policy.refuse(ask, f"uploads {stale} belong to another round")
        first = self._round_uploads.setdefault(ask.round_id, {})
        for uid in uids:  # the upload each participant's first opening of the round used
            first.setdefault(self._seeds[uid][0], uid)

    # -- uploads --------------------------------------------------------------------

    def _load(self, header: dict[str, object], payload: bytes) -> Reply:
        pid, uid = header.get("participant_id"), header.get("upload_id")
        if not isinstance(pid, str) or not isinstance(uid, str) or pid not in self.secrets:
            raise UploadMalformed(f"helper does not know participant {pid!r}")
        if uid in self._seeds:
            if self._seeds[uid][0] != pid:
                raise UploadMalformed(f"upload id {uid} was already used by another participant")
            return {"ok": True}, b""  # idempotent reload after a restart
        secret = self.secrets[pid]
        label = ShareLabel(round_id=0, participant_id=pid, tensor=f"pred-{uid}")
        try:
            blob = SM4GCM(seal_key(secret)).decrypt(
                payload, associated_data=f"{pid}|{uid}".encode()
            )
            bundle = ShareBundle.parse(
                blob,
                key=ShareMacKey.derive(secret, recipient="helper"),
                label=label,
                party=1,
                seeded=True,
                count=self.shape[0] * self.shape[1],
            )
        except CryptoError as exc:
            raise UploadMalformed(f"helper share of {pid!r} refused: {exc}") from exc
        self._seeds[uid] = (pid, bundle)
        return {"ok": True}, b""

    def _shares(self, raw: object) -> tuple[list[str], list[np.ndarray]]:
        if not isinstance(raw, list) or not raw or not all(isinstance(u, str) for u in raw):
            raise AuthorityRequestMalformed("request needs a non-empty list of upload ids")
        uids = [str(u) for u in raw]
        missing = [u for u in uids if u not in self._seeds]
        if missing:
            raise AuthorityRequestMalformed(f"helper holds no share of uploads {missing}")
        self.range_checks.require_passed(uids)
        return uids, [self._seeds[u][1].values().reshape(self.shape) for u in uids]

    def _ask(
        self,
        purpose: str,
        uids: list[str],
        round_id: int,
        weights: tuple[float, ...] | None = None,
        **plan: object,
    ) -> ReleaseRequest:
        """Build the policy's view: contributors named from the uploads the helper holds."""
        score = purpose == "score"
        return ReleaseRequest(
            round_id=round_id,
            purpose=purpose,
            contributors=tuple(self._seeds[u][0] for u in uids),
            value_kind="score" if score else "aggregate",
            shape=(1,) if score else (),
            weights=weights,
            **plan,  # type: ignore[arg-type]
        )

    def _pids(self, uids: list[str]) -> tuple[str, ...]:
        return tuple(self._seeds[u][0] for u in uids)

    # -- linear openings ----------------------------------------------------------------

    def _linear(self, header: dict[str, object], payload: bytes) -> Reply:
        purpose, round_id = header.get("purpose", "aggregate"), _int(header, "round_id")
        if purpose in DISTANCE_NAMES:
            self._refuse_distance(header, round_id)
        if purpose not in LINEAR_PURPOSES:
            raise AuthorityRequestMalformed(
                f"linear purpose {purpose!r} is unknown; allowed: {list(LINEAR_PURPOSES)}"
            )
        uids, shares = self._shares(header.get("uids"))
        weights = _weights(header.get("weights"))
        ask = self._ask(str(purpose), uids, round_id, weights=weights)
        self.policy.check(ask)
        self._bind(ask, uids)
        out = weighted_share(shares, list(weights))
        self.policy.released(replace(ask, shape=out.shape))
        meta, data = encode_array(out, "u8")
        return {"array": meta}, data

    # -- Beaver products: moments and scores -------------------------------------------

    def _open(self, header: dict[str, object], payload: bytes) -> Reply:
        kind, op_id = header.get("kind"), str(header.get("op_id"))
        round_id = _int(header, "round_id")
        if kind in DISTANCE_NAMES:
            self._refuse_distance(header, round_id)
        if kind not in BEAVER_KINDS:
            raise AuthorityRequestMalformed(
                f"Beaver kind {kind!r} is unknown; allowed: {BEAVER_KINDS}"
            )
        uids, shares = self._shares(header.get("uids"))
        centre_uids, centre = self._shares(header.get("centre"))
        asks = self._beaver_asks(str(kind), uids, centre_uids, round_id)
        carried = sorted(f for f in DERIVED_FIELDS if f in header)
        if carried:
            self.policy.refuse(
                asks[0], f"the helper derives {carried} itself; the request set them"
            )
        for ask in asks:
            self.policy.check(ask)
        self._bind(asks[0], sorted({*uids, *centre_uids}))
        (triples,) = split_parts(header, payload)
        tracker = self._tracker(asks[0])
        if kind == "moments":
            rows, fz = tracker.rows("moments"), CODEC.frac_bits
            check_moment_room(len(centre), rows)
            x, y = pair_factors(
                [centred_difference(s[:rows], [c[:rows] for c in centre]) for s in shares]
            )
        else:
            x, rows, fz = self._score_factors(tracker, str(kind), shares, centre)
            y = x
        party, message = self._beaver(asks[0], str(header.get("tensor")), x, y, triples)
        self._pending[op_id] = _Pending(party, asks, str(kind), rows, fz)
        return {"op_id": op_id, "step": kind, "round_id": round_id}, message

    def _beaver_asks(
        self, kind: str, uids: list[str], centre: list[str], round_id: int
    ) -> list[ReleaseRequest]:
        """Build the policy's view of a Beaver opening, every input from the helper's view."""
        tracker = self.plans.tracker(round_id)
        rows = tracker.rows(kind) if tracker is not None else None
        if kind == "moments":
            c = self.shape[1]
            ask = self._ask("moments", uids, round_id, centre=self._pids(centre), samples=rows)
            return [replace(ask, shape=(c, c))]
        claim = tracker.whitening_claim(kind) if tracker is not None and kind == "final" else None
        return [
            self._ask(
                "score",
                [u],
                round_id,
                step=kind,
                roster=self._pids(uids),
                centre=self._pids(centre),
                samples=rows,
                whitening=claim,
            )
            for u in uids
        ]

    def _score_factors(
        self, tracker: PlanTracker, kind: str, shares: list[np.ndarray], centre: list[np.ndarray]
    ) -> tuple[np.ndarray, int, int]:
        """``z = (W / m)(m x_k - sum_j x_j)``: W, rows and m from the plan and opened values."""
        rows, m = tracker.rows(kind), len(centre)
        whiten = np.eye(self.shape[1]) if kind == "ranking" else tracker.whiten
        assert whiten is not None  # the plan check ensured the covariance was opened
        plan = score_plan(np.asarray(whiten) / m, n_samples=rows, input_scale=m)
        group = [c[:rows] for c in centre]
        z = [whiten_shares(centred_difference(s[:rows], group), plan, party=1) for s in shares]
        return np.concatenate([v.reshape(-1) for v in z]), rows, plan.fz

    def _beaver(
        self, ask: ReleaseRequest, tensor: str, x: np.ndarray, y: np.ndarray, triples: bytes
    ) -> tuple[BeaverParty, bytes]:
        if not self.registry.claim_triple(ask.round_id, tensor):
            self.policy.refuse(ask, f"Beaver triple label {tensor!r} was already used")
        label = ShareLabel(round_id=ask.round_id, participant_id="beaver", tensor=tensor)
        try:
            triple = TripleShare.parse(
                triples, key=self.dealer_key, label=label, party=1, count=x.size
            )
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"triples refused: {exc}") from exc
        party = BeaverParty(triples=triple, channel_key=self.channel_key)
        return party, party.open(x, y)

    def _finish(self, header: dict[str, object], payload: bytes) -> Reply:
        op_id, round_id = str(header.get("op_id")), _int(header, "round_id")
        pending = self._pending.get(op_id)
        if pending is None:
            raise AuthorityRequestMalformed(f"no open Beaver operation {op_id!r}")
        if pending.asks[0].round_id != round_id:
            raise AuthorityRequestMalformed(f"operation {op_id!r} belongs to another round")
        del self._pending[op_id]
        opening, theirs_raw = split_parts(header, payload)
        try:
            product = pending.party.finish(opening)
        except CryptoError as exc:
            raise AuthorityRequestMalformed(f"aggregator opening refused: {exc}") from exc
        theirs = np.asarray(decode_array(header.get("array"), theirs_raw), dtype=np.uint64)
        out = self._output(pending, product)
        if theirs.shape != out.shape:
            raise AuthorityRequestMalformed("the aggregator's output share has the wrong shape")
        self._release(pending, out + theirs)
        meta, data = encode_array(out, "u8")
        return {"array": meta, "op_id": op_id, "step": pending.kind, "round_id": round_id}, data

    def _output(self, pending: _Pending, product: np.ndarray) -> np.ndarray:
        count = sum(len(a.contributors) for a in pending.asks)
        if pending.kind == "moments":
            c = self.shape[1]
            pairs = c * (c + 1) // 2
            return moment_sums(product, count=count, pairs=pairs, samples=pending.rows)
        return score_sums(product, count=count)

    def _release(self, pending: _Pending, total: np.ndarray) -> None:
        """Open the value both parties now hold, and advance the plan on it."""
        values = CODEC.decode(total, frac_bits=2 * pending.fz)
        if pending.kind == "moments":
            h = len(pending.asks[0].contributors)
            moment = symmetric_from_pairs(values / float(h * h), self.shape[1])
            self.policy.released(pending.asks[0], values=moment)
            return
        for ask, value in zip(pending.asks, values, strict=True):
            self.policy.released(ask, values=np.array([float(value) / pending.rows]))

    # -- evidence of correctness: the plan's slice mask on the helper's own shares ------

    def _evidence(self, header: dict[str, object], payload: bytes) -> Reply:
        """Open one evidence scalar per upload, the helper applying the plan's mask itself.

        The request names the uploads and the slice it means (refused unless it is
        the plan's) and carries the aggregator's sums; another mask on the
        aggregator's side only shifts each value by an offset the aggregator knows.
        """
        round_id = _int(header, "round_id")
        uids, shares = self._shares(header.get("uids"))
        theirs = np.asarray(decode_array(header.get("array"), payload), dtype=np.uint64)
        if theirs.shape != (len(uids),):
            raise AuthorityRequestMalformed("the aggregator's evidence sums have the wrong shape")
        tracker = self.plans.tracker(round_id)
        view: dict[str, object] = {"step": "evidence", "evidence": slice_from_fields(header)}
        if tracker is not None:
            view.update(roster=tracker.roster, samples=tracker.rows("evidence"))
        asks = [self._ask("score", [u], round_id, None, **view) for u in uids]
        if len(set(self._pids(uids))) != len(uids):
            self.policy.refuse(asks[0], "one evidence scalar per participant; ids repeat")
        for ask in asks:
            self.policy.check(ask)
        self._bind(asks[0], uids)
        piece = self._tracker(asks[0]).plan.evidence
        assert piece is not None  # the plan allowed an evidence step
        mine = evidence_sums(shares, piece)
        values = open_sums(mine, theirs, rows=len(piece.rows), classes=self.shape[1])
        for ask, value in zip(asks, values, strict=True):
            self.policy.released(ask, values=np.array([value]))
        meta, data = encode_array(mine, "u8")
        return {"array": meta, "step": "evidence", "round_id": round_id}, data


def _weights(raw: object) -> tuple[float, ...]:
    numbers = [number_from_wire(w) for w in raw] if isinstance(raw, list) else [None]
    if not all(w is not None for w in numbers):
        raise AuthorityRequestMalformed("linear openings need a list of numeric weights")
    return tuple(float(w) for w in numbers if w is not None)


def plan_request(plan: ReleasePlan, *, key: ChannelKey) -> bytes:
    """Build the helper request fixing ``plan``, tagged with the channel ``key``."""
    header: dict[str, object] = {
        "op": "plan",
        "round_id": plan.round_id,
        "purpose": "plan",
        "parts": [len(plan.to_bytes())],
    }
    return authenticate_request(
        HELPER_REQUEST, header, plan.to_bytes(), signer=key, round_id=plan.round_id, purpose="plan"
    )


def helper_request(
    header: Mapping[str, object], payload: bytes = b"", *, key: ChannelKey, round_id: int
) -> bytes:
    """Build a helper request for ``header["op"]``, tagged with the channel ``key``.

    The tag binds every header field (the operation among them), ``round_id``
    (a header ``round_id`` must equal it), the purpose (the header's, else the
    operation), a fresh nonce and the SM3 of ``payload``
    (:func:`~secure_fed.secure.server_auth.authenticate_request`).

    Raises
    ------
    AuthorityRequestMalformed
        If the header names no operation.
    """
    op = header.get("op")
    if not isinstance(op, str):
        raise AuthorityRequestMalformed("a helper request names its operation ('op')")
    purpose = str(header.get("purpose", op))
    return authenticate_request(
        HELPER_REQUEST, dict(header), payload, signer=key, round_id=round_id, purpose=purpose
    )


def reply_array(reply: bytes) -> tuple[dict[str, object], np.ndarray | bytes]:
    """Parse a helper reply: ``(header, array or raw bytes)``.

    Raises
    ------
    AuthorityRequestMalformed
        On a malformed reply frame or array.
    """
    header, payload = decode_frame(reply, HELPER_REPLY)
    if "array" in header:
        return header, decode_array(header["array"], payload)
    return header, payload
