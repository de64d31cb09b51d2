"""Rosters the aggregator cannot choose: a gatekeeper's book of signed upload notices.

Without notices, an aggregator that withholds an accepted upload is indistinguishable
from a dropout: it chooses each round's roster, and two publications whose rosters
differ by one participant subtract to that participant's matrix (up to drift). With
notices, each participant first tells the round's opening gatekeeper (the key authority
in ``ckks`` mode, the helper in ``shares`` mode) that it uploads, and the SM3 of what
that gatekeeper will see of the upload (:mod:`secure_fed.secure.protocol.upload_notice`).
:class:`NoticeBook` keeps those notices, journalled before they are acknowledged, and
refuses, before anything is released:

* a scoring pass, the covariance or the publication whose roster leaves out a noticed
  participant (:class:`~secure_fed.errors.RosterOmitsNoticed`). The roster is the
  request's own (a score names it), else the one the round's plan fixed, else the
  request's contributors; once fixed, the plan's own rules decide who may still be left
  out of the publication: the exclusion rule on the opened scores and the copies rule.
  Those are the only policy reasons. An upload the aggregator found invalid is **not**
  one: the gatekeeper cannot re-derive that refusal from its own view (the receipt
  keys, the round's contract, the other share), and accepting the aggregator's word
  for it is the withholding attack again. A noticed upload the aggregator refuses
  therefore aborts the round, like a noticed upload lost in transit; a participant
  notices only an upload it stands behind (one without the budget receipt the round
  requires is not noticed).
* a request listing, for a noticed participant, an upload whose SM3 differs from the
  notice (:class:`~secure_fed.errors.UploadDiffersFromNotice`): the key authority reads
  the claim's ``[id, sm3]`` pairs (uploads and hidden centre), the helper the SM3 of
  the sealed share it was loaded with.

Each refusal is a row of the gatekeeper's log and an ``access.denied`` event (op
``roster``) naming the participants. A participant that never sent a notice is an
honest dropout: the round publishes with the rest.

Notices are accepted only for a round whose plan is installed and none of whose values
has been opened (:class:`~secure_fed.errors.UploadNoticeRound` otherwise: another
round's, a future round's or a late notice), once per participant and round
(:class:`~secure_fed.errors.UploadNoticeDuplicate`); a malformed, oversized or forged
notice is refused before anything is recorded. Every accepted notice is an
``upload.noticed`` event; every refused one an ``access.denied`` event (op ``notice``).
The signed bytes are journalled (:meth:`PlanJournal.record_notice`) and verified again
when a restarted gatekeeper replays them.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from crypto.sm import SM2PublicKey, sm3_digest
from privacy_ledger.audit import canonical
from privacy_ledger.audit.events import register_event
from secure_fed.errors import (
    ModeSetupInvalid,
    ReleaseRefused,
    RosterOmitsNoticed,
    UploadDiffersFromNotice,
    UploadNoticeDuplicate,
    UploadNoticeForged,
    UploadNoticeMalformed,
    UploadNoticeRound,
)
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.plan_book import PlanBook
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.protocol.upload_notice import NOTICE_DOMAIN, UploadNotice, parse_notice
from secure_fed.secure.protocol.vocabulary import AuditEvent, Step
from secure_fed.secure.release_policy import DecryptionRecord, ReleaseRequest

__all__ = ["NOTICE_EVENT", "NoticeBook"]

_log = logging.getLogger(__name__)

#: Audit event of an accepted upload notice.
NOTICE_EVENT = register_event(
    "upload.noticed",
    "A gatekeeper recorded a participant's signed upload notice (one per participant and round).",
).name
_NoticeRefused = (
    UploadNoticeMalformed,
    UploadNoticeForged,
    UploadNoticeRound,
    UploadNoticeDuplicate,
)


@dataclass
class NoticeBook:
    """A gatekeeper's upload notices, one per participant and round.

    Parameters
    ----------
    party
        The gatekeeper (``key_authority`` or ``helper``): notices must be addressed to it.
    plans
        The gatekeeper's plan book: a notice is taken only while its round's plan is
        installed and unopened.
    keys
        Every enrolled participant's SM2 public key (the consortium pin's); ``None``:
        no notice can be verified, so every one is refused.
    journal
        Where accepted notices are written before they are acknowledged (the plan
        journal); replayed here at start. ``None``: memory only.
    audit
        Sink of ``upload.noticed`` and ``access.denied`` events.

    Raises
    ------
    ModeSetupInvalid
        The journal holds a notice that no longer verifies.
    """

    party: str
    plans: PlanBook
    keys: Mapping[str, SM2PublicKey] | None = field(default=None, repr=False)
    journal: PlanJournal | None = field(default=None, repr=False)
    audit: AuditSink | None = None
    notices: dict[int, dict[str, str]] = field(default_factory=dict)
    #: The helper's view: upload id -> SM3 of the sealed share it was loaded with.
    shares: dict[str, str] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.journal is None:
            return
        stored = self.journal.notices()
        for raw in stored:
            try:
                if self.keys is None:
                    raise UploadNoticeForged("no participant keys are enrolled")
                notice = parse_notice(raw, party=self.party, keys=self.keys)
            except (UploadNoticeMalformed, UploadNoticeForged) as exc:
                raise ModeSetupInvalid(f"plan journal: a stored notice fails: {exc}") from exc
            self.notices.setdefault(notice.round_id, {})[notice.participant_id] = notice.upload_sm3
        if stored:
            _log.info("plan journal: %d upload notices replayed", len(stored))

    # -- notices -------------------------------------------------------------------

    def accept(self, raw: bytes) -> bytes:
        """Verify and record one participant's notice; return the acknowledgement.

        The acknowledgement is canonical JSON naming the round, participant and digest
        recorded; the notice is journalled before it is returned.

        Raises
        ------
        UploadNoticeMalformed, UploadNoticeForged, UploadNoticeRound, UploadNoticeDuplicate
            Nothing recorded; an ``access.denied`` event (op ``notice``) with the code.
        """
        notice: UploadNotice | None = None
        try:
            if self.keys is None:
                raise UploadNoticeForged("no participant keys are enrolled with this gatekeeper")
            notice = parse_notice(raw, party=self.party, keys=self.keys)
            with self._lock:
                self._record(notice, raw)
        except _NoticeRefused as exc:
            self._notice_denied(exc, notice)
            raise
        _log.info(
            "%s recorded the upload notice of %s for round %d",
            self.party,
            notice.participant_id,
            notice.round_id,
        )
        fields = {
            "party": self.party,
            "round_id": notice.round_id,
            "participant_id": notice.participant_id,
            "upload_sm3": notice.upload_sm3,
        }
        if self.audit is not None:
            self.audit.record(NOTICE_EVENT, {**fields, "notice_sm3": sm3_digest(raw).hex()})
        return canonical.encode({"domain": NOTICE_DOMAIN, "noticed": True, **fields})

    def _record(self, notice: UploadNotice, raw: bytes) -> None:
        reason = self.window_reason(notice.round_id)
        if reason is not None:
            raise UploadNoticeRound(reason)
        round_notices = self.notices.setdefault(notice.round_id, {})
        duplicate = UploadNoticeDuplicate(
            f"{notice.participant_id!r} already sent a notice for round {notice.round_id}; "
            "the first stays in force"
        )
        if notice.participant_id in round_notices:
            raise duplicate
        if self.journal is not None and not self.journal.record_notice(
            notice.round_id, notice.participant_id, raw
        ):
            raise duplicate
        round_notices[notice.participant_id] = notice.upload_sm3

    def window_reason(self, round_id: int) -> str | None:
        """Why a notice for ``round_id`` is not taken now (no plan, or openings begun)."""
        tracker = self.plans.tracker(round_id)
        if tracker is None:
            return f"no release plan is fixed for round {round_id}: no notice is taken for it"
        begun = (
            tracker.roster is not None
            or tracker.phase == Step.DONE
            or bool(tracker.pass_scores)
            or bool(tracker.distances)
        )
        if begun:
            return f"round {round_id}'s openings have begun: the notice is late"
        return None

    def _notice_denied(self, exc: ReleaseRefused | Exception, notice: UploadNotice | None) -> None:
        _log.warning("%s refused an upload notice: %s", self.party, exc)
        if self.audit is None:
            return
        fields: dict[str, object] = {
            "party": self.party,
            "op": "notice",
            "code": getattr(exc, "code", type(exc).__name__),
            "reason": str(exc),
        }
        if notice is not None:
            fields.update(round_id=notice.round_id, participant_ids=[notice.participant_id])
        self.audit.record(AuditEvent.ACCESS_DENIED, fields)

    # -- rosters -------------------------------------------------------------------

    def loaded_share(self, upload_id: str, share: bytes) -> None:
        """Remember the SM3 of the sealed share the helper was loaded with under ``upload_id``."""
        self.shares.setdefault(upload_id, sm3_digest(share).hex())

    def share_digests(self, uploads: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Return ``(participant, share SM3)`` for ``(participant, upload id)`` pairs."""
        return [(pid, self.shares.get(uid, "")) for pid, uid in uploads]

    def require(
        self,
        ask: ReleaseRequest,
        uploads: Iterable[tuple[str, str]],
        *,
        log: list[DecryptionRecord] | None = None,
    ) -> None:
        """Refuse ``ask`` if it swaps a noticed upload or its roster omits a noticed participant.

        Parameters
        ----------
        ask
            The request as the gatekeeper established it (already allowed by its plan).
        uploads
            ``(participant, SM3)`` of every upload the request computes over, as the
            gatekeeper sees them.
        log
            The gatekeeper's log: a refusal appends a row.

        Raises
        ------
        UploadDiffersFromNotice, RosterOmitsNoticed
            After a log row and an ``access.denied`` event (op ``roster``).
        """
        noticed = self.notices.get(ask.round_id)
        if not noticed:
            return
        for pid, digest in uploads:
            want = noticed.get(pid)
            if want is not None and not hmac.compare_digest(want, str(digest)):
                self._refuse(
                    ask,
                    UploadDiffersFromNotice,
                    [pid],
                    f"the upload listed for {pid!r} is not the one its notice names",
                    log,
                )
        roster = self._roster(ask)
        if roster is None:
            return
        omitted = sorted(set(noticed) - set(roster))
        if omitted:
            self._refuse(
                ask,
                RosterOmitsNoticed,
                omitted,
                f"the roster leaves out {omitted}, who sent upload notices for the round",
                log,
            )

    def _roster(self, ask: ReleaseRequest) -> tuple[str, ...] | None:
        """Return the roster ``ask`` asserts (``None``: a step that fixes none, e.g. copies)."""
        tracker = self.plans.tracker(ask.round_id)
        if tracker is None:
            return None
        step = tracker.step_of(ask)
        if step in (Step.RANKING, Step.FINAL, Step.EVIDENCE):
            return tuple(ask.roster or ())
        if step in (Step.MOMENTS, Step.PUBLICATION):
            return tracker.roster if tracker.roster is not None else ask.contributors
        return None

    def _refuse(
        self,
        ask: ReleaseRequest,
        error: type[ReleaseRefused],
        named: list[str],
        reason: str,
        log: list[DecryptionRecord] | None,
    ) -> NoReturn:
        ids = ask.contributors
        if log is not None:
            log.append(
                DecryptionRecord(
                    ask.round_id,
                    ask.purpose,
                    "refused",
                    ask.shape,
                    len(ids),
                    ids,
                    False,
                    time.time(),
                    False,
                    ask.weights,
                )
            )
        _log.warning("%s refused %s of round %d: %s", self.party, ask.purpose, ask.round_id, reason)
        if self.audit is not None:
            self.audit.record(
                AuditEvent.ACCESS_DENIED,
                {
                    "party": self.party,
                    "op": "roster",
                    "round_id": ask.round_id,
                    "purpose": ask.purpose,
                    "code": error.code,
                    "reason": reason,
                    "participant_ids": named,
                },
            )
        raise error(f"round {ask.round_id}, {ask.purpose}: {reason}")
