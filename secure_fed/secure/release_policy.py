"""The one release policy of both gatekeepers: the key authority and the shares helper.

A gatekeeper releases a value (decrypts a ciphertext, or gives its share of an
opening) only when the policy allows it. The rules:

* an aggregate (purposes ``aggregate``, ``mean``, ``moments``) combines at least
  ``min_participants`` **distinct** participants, each exactly once: a repeated
  id is refused, never counted twice;
* a score (purpose ``score``) is one scalar of exactly one participant;
* a pair distance (purpose ``distance``) is one scalar of exactly two distinct
  participants, which the gatekeeper keeps to itself (the release plan's
  ``copies`` step releases only near-duplicate counts);
* one participant's upload is never released, whatever the purpose says;
* when the value itself says how many contributions it combines (a CKKS
  aggregate's header), that count equals the number of participant ids;
* public weights the gatekeeper applies itself lie in ``(0, 1]``, one per
  contribution.

The policy decides from a :class:`ReleaseRequest` the gatekeeper fills from its
own view wherever it can: the helper names contributors from the uploads it
holds (not from labels in the request) and the key authority reads the value's
kind and contributor count from the ciphertext header before parsing it.
Extra rules plug in through :class:`ReleaseRule` (a per-round release plan,
fixed before uploads, naming which values are opened over which participants
with which weights, is one). Every refusal is a row of the gatekeeper's log
(:class:`DecryptionRecord`), an ``access.denied`` audit event and the
gatekeeper's typed error (``DecryptionRefused`` or ``OpeningRefused``); every
release is a row and a ``decryption.released`` event.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

import numpy as np

from secure_fed.errors import ModeSetupInvalid, ReleaseRefused
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.protocol.vocabulary import AuditEvent, Purpose
from secure_fed.secure.scoring.evidence import EvidenceSlice

__all__ = [
    "AGGREGATE_PURPOSES",
    "PURPOSES",
    "SCALAR_PURPOSES",
    "DecryptionRecord",
    "ObservingRule",
    "ReleasePolicy",
    "ReleaseRequest",
    "ReleaseRule",
]

_log = logging.getLogger(__name__)

#: Purposes whose value must be an aggregate over >= min_participants.
AGGREGATE_PURPOSES = (Purpose.AGGREGATE, Purpose.MEAN, Purpose.MOMENTS)
#: Every purpose a gatekeeper may be asked to release.
PURPOSES = (*AGGREGATE_PURPOSES, Purpose.SCORE, Purpose.DISTANCE)
#: Purposes whose value is one scalar (a ``score``-kind ciphertext in ckks mode).
SCALAR_PURPOSES = (Purpose.SCORE, Purpose.DISTANCE)


@dataclass(frozen=True)
class DecryptionRecord:
    """One row of a gatekeeper's log (no values, only what was released and for whom)."""

    round_id: int
    purpose: str
    kind: str
    shape: tuple[int, ...]
    contributors: int
    participant_ids: tuple[str, ...]
    released: bool
    at: float
    central_dp: bool = False
    weights: tuple[float, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """What a gatekeeper is about to release, as the gatekeeper itself established it.

    Parameters
    ----------
    round_id
        The round the value belongs to.
    purpose
        One of :data:`PURPOSES`.
    contributors
        One participant id per contribution (repeats are kept, to be refused).
    value_kind
        What the value is: ``aggregate``, ``score`` or ``upload``.
    shape
        Shape of what would be released (``(1,)`` for a score).
    counted
        Contributions the value itself claims to combine, when it says so.
    weights
        Public weights the gatekeeper applies itself, one per contribution (or,
        for the key authority, the weights the request claims).
    step
        Release-plan step of a score: ``ranking``, ``final`` or ``evidence``
        (a ``distance`` is the ``copies`` step).
    roster
        Every participant of the scoring pass this value belongs to.
    centre
        Participants whose (never opened) mean centres a score or moment.
    samples
        Rows a score or moment averages over.
    whitening
        Whitening a final score uses, row by row (derived or claimed).
    evidence
        The labeled slice whose mask an evidence scalar applies (claimed).
    """

    round_id: int
    purpose: str
    contributors: tuple[str, ...]
    value_kind: str
    shape: tuple[int, ...]
    counted: int | None = None
    weights: tuple[float, ...] | None = None
    step: str | None = None
    roster: tuple[str, ...] | None = None
    centre: tuple[str, ...] | None = None
    samples: int | None = None
    whitening: tuple[tuple[float, ...], ...] | None = None
    evidence: EvidenceSlice | None = None


class ReleaseRule(Protocol):
    """An extra rule: return why ``request`` must be refused, or ``None`` to allow it."""

    def __call__(self, request: ReleaseRequest) -> str | None:
        """Return a refusal reason or ``None``."""
        ...


class ObservingRule(ReleaseRule, Protocol):
    """A rule that also learns each released value (a release plan's state machine)."""

    def observe(self, request: ReleaseRequest, values: np.ndarray | None) -> None:
        """Advance on ``values``, just released for ``request``."""
        ...


def _shape_reason(request: ReleaseRequest, min_participants: int) -> str | None:
    distinct = len(set(request.contributors))
    if distinct != len(request.contributors):
        return f"participant ids repeat ({len(request.contributors)} ids, {distinct} distinct)"
    if request.purpose == Purpose.SCORE:
        if len(request.contributors) != 1:
            return "a score belongs to exactly one participant"
        if math.prod(request.shape) != 1:
            return f"a score is one scalar, not shape {request.shape}"
    elif request.purpose == Purpose.DISTANCE:
        if distinct != 2:
            return "a pair distance belongs to exactly two distinct participants"
        if math.prod(request.shape) != 1:
            return f"a pair distance is one scalar, not shape {request.shape}"
    elif distinct < min_participants:
        return (
            f"{request.purpose} over {distinct} distinct participants; "
            f"at least {min_participants} needed"
        )
    return None


def _value_reason(request: ReleaseRequest) -> str | None:
    if request.value_kind == "upload":
        return "a single participant's upload is never released"
    wanted = "score" if request.purpose in SCALAR_PURPOSES else "aggregate"
    if request.value_kind != wanted:
        return f"purpose {request.purpose!r} needs a {wanted!r} value, got {request.value_kind!r}"
    # a scalar is a score-kind value (one contribution in its header), a pair distance too
    expected = 1 if request.purpose in SCALAR_PURPOSES else len(request.contributors)
    if request.counted is not None and request.counted != expected:
        return (
            f"contributor count {request.counted} of the value differs from the "
            f"{expected} its purpose and participant ids give"
        )
    weights = request.weights
    if weights is not None and (
        len(weights) != len(request.contributors) or not all(0 < w <= 1 for w in weights)
    ):
        return "linear openings need one weight in (0, 1] per contribution"
    return None


@dataclass(kw_only=True)
class ReleasePolicy:
    """Decide, refuse (typed error + audit) and record releases for one gatekeeper.

    Parameters
    ----------
    party
        ``key_authority`` or ``helper`` (named in audit events).
    min_participants
        Smallest distinct participant set of a released aggregate (>= 2).
    refusal
        The gatekeeper's typed error (``DecryptionRefused`` or ``OpeningRefused``).
    audit
        Sink of ``access.denied`` and ``decryption.released`` events.
    log
        The gatekeeper's log; refusals and releases are appended.
    rules
        Extra rules checked after the built-in ones (e.g. a round's release plan).
    """

    party: str
    min_participants: int
    refusal: type[ReleaseRefused]
    audit: AuditSink | None = None
    log: list[DecryptionRecord] = field(default_factory=list)
    rules: tuple[ReleaseRule, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.min_participants, int) or self.min_participants < 2:
            raise ModeSetupInvalid(
                f"min_participants must be an integer >= 2, got {self.min_participants!r}"
            )

    def reason(self, request: ReleaseRequest) -> str | None:
        """Return why ``request`` must be refused, or ``None`` when it may be released."""
        if request.purpose not in PURPOSES:
            return f"purpose {request.purpose!r} is not one of {list(PURPOSES)}"
        found = _shape_reason(request, self.min_participants) or _value_reason(request)
        for rule in self.rules:
            found = found or rule(request)
        return found

    def check(self, request: ReleaseRequest) -> None:
        """Return if ``request`` may be released; otherwise refuse it.

        Raises
        ------
        ReleaseRefused
            ``self.refusal``, after a log row and an ``access.denied`` event.
        """
        found = self.reason(request)
        if found is not None:
            self.refuse(request, found)

    def refuse(self, request: ReleaseRequest, reason: str) -> NoReturn:
        """Refuse ``request`` for ``reason``: log row, ``access.denied`` event, typed error.

        Raises
        ------
        ReleaseRefused
            Always: ``self.refusal``.
        """
        fields = self._record(request, released=False)
        _log.warning(
            "%s refused %s of round %d: %s", self.party, request.purpose, request.round_id, reason
        )
        if self.audit is not None:
            self.audit.record(AuditEvent.ACCESS_DENIED, {**fields, "reason": reason})
        raise self.refusal(f"round {request.round_id}, {request.purpose}: {reason}")

    def released(
        self,
        request: ReleaseRequest,
        *,
        central_dp: bool = False,
        values: np.ndarray | None = None,
    ) -> None:
        """Record that ``request`` was released (log row, ``decryption.released`` event).

        Rules that observe releases (a release plan) learn ``values``: the
        released value itself (a score, the pooled second moment), so the
        gatekeeper derives the next allowed opening from what was opened.
        """
        for rule in self.rules:
            observe = getattr(rule, "observe", None)
            if observe is not None:
                observe(request, values)
        fields = self._record(request, released=True, central_dp=central_dp)
        if self.audit is not None:
            extra: dict[str, object] = {"shape": list(request.shape), "central_dp": central_dp}
            if request.weights is not None:
                extra["weights"] = list(request.weights)
            ids = {"participant_ids": list(request.contributors)}
            self.audit.record(AuditEvent.DECRYPTION_RELEASED, {**fields, **extra, **ids})

    def _record(
        self, request: ReleaseRequest, *, released: bool, central_dp: bool = False
    ) -> dict[str, object]:
        ids = request.contributors
        kind = request.value_kind if released else "refused"
        row = DecryptionRecord(
            request.round_id,
            request.purpose,
            kind,
            request.shape,
            len(ids),
            ids,
            released,
            time.time(),
            central_dp,
            request.weights,
        )
        self.log.append(row)
        return {
            "party": self.party,
            "round_id": request.round_id,
            "purpose": request.purpose,
            "contributors": len(ids),
        }
