"""Empirical privacy audits beside the accounted epsilon: the ``budget.audited`` entries.

A one-run audit (Steinke, Nasr, Jagielski 2023) trains with canaries, each
included with probability 1/2, guesses which were included, and turns the
number of correct guesses into a lower bound on epsilon at a stated confidence.
The accountant gives an *upper* bound for the same training; a lower bound
above it means differential privacy was not applied as charged.

:class:`EmpiricalAudit` is one audit's result, validated on construction.
:func:`record_empirical_audit` appends it to the ledger's signed audit log as a
``budget.audited`` entry (subject ``participant:<id>``; decimals as strings, no
floats), in one transaction with a lock on the budget it audits;
:func:`record_empirical_audit_once` does the same unless an entry with exactly
these fields is already there (a resent request records nothing more).
:func:`empirical_audits` and :func:`latest_empirical_audits` read the entries
back; :func:`audit_from_fields` parses one entry's fields (for readers of an
exported log), and :func:`accounted_epsilon_over` recomputes the ledger's own
epsilon over the audited rounds, which is what a bound is compared with.

The audit log is the one truth: every report, page and API that shows a bound
reads it from these entries (``docs/audit/dp-accounting.md``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, Protocol

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.budget import accountant as acc
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.participants import check_id
from privacy_ledger.budget.types import AuditAppender
from privacy_ledger.errors import (
    BudgetNotSet,
    CanonicalJSONInvalid,
    LedgerError,
    LedgerParameterInvalid,
)
from privacy_ledger.models import Budget, PrivacyEventRow

__all__ = [
    "AUDITED_EVENT",
    "NOT_AUDITED",
    "AuditedBudget",
    "LedgerHandle",
    "audited_budgets",
    "EmpiricalAudit",
    "EmpiricalAuditInvalid",
    "EmpiricalAuditUnrecordable",
    "RecordedAudit",
    "accounted_epsilon_over",
    "audit_from_fields",
    "empirical_audits",
    "latest_empirical_audits",
    "record_empirical_audit",
    "record_empirical_audit_once",
]

#: Event type of an empirical audit entry (registered in :mod:`privacy_ledger.audit.events`).
AUDITED_EVENT = "budget.audited"

_FIELDS = (
    "participant",
    "asset",
    "rounds_from",
    "rounds_to",
    "canaries",
    "guesses",
    "correct",
    "score",
    "confidence",
    "delta",
    "epsilon_lower_bound",
    "epsilon_accounted",
    "method",
)
#: What every display shows for a budget that has no ``budget.audited`` entry.
NOT_AUDITED = "not audited"

_DECIMALS = ("confidence", "delta", "epsilon_lower_bound", "epsilon_accounted")
_COUNTS = ("canaries", "guesses", "correct")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,63}$")
_MAX_CANARIES = 10**9


class EmpiricalAuditInvalid(LedgerParameterInvalid):
    """An empirical audit's figures are malformed or inconsistent, or it names unknown rounds."""

    code: ClassVar[str] = "LEDGER_EMPIRICAL_AUDIT_INVALID"


class EmpiricalAuditUnrecordable(LedgerError):
    """The ledger cannot record an empirical audit: it was opened without an audit log."""

    code: ClassVar[str] = "LEDGER_EMPIRICAL_AUDIT_UNRECORDABLE"


class LedgerHandle(Protocol):
    """What these functions need of a :class:`privacy_ledger.PrivacyLedger`: its engine.

    The ledger's audit log (``audit=`` when it was opened) is where
    :func:`record_empirical_audit` writes. Naming the ledger by this protocol
    keeps this module free of the ledger's cryptography (callers in
    ``secure_fed.learning`` may import it; see docs/architecture.md).
    """

    engine: Engine


def _engine_of(ledger: object) -> Engine:
    engine = getattr(ledger, "engine", None)
    if not isinstance(engine, Engine):
        raise LedgerParameterInvalid(f"ledger: expected a PrivacyLedger, got {ledger!r}")
    return engine


def _budget(session: Session, participant: str, asset: str, *, lock: bool = False) -> Budget:
    stmt = select(Budget).where(Budget.participant_id == participant, Budget.asset_id == asset)
    if lock:
        stmt = stmt.with_for_update()
    budget = session.execute(stmt).scalar_one_or_none()
    if budget is None:
        raise BudgetNotSet(f"participant {participant!r}, asset {asset!r}: no budget set")
    return budget


def _committed(session: Session, budget: Budget) -> list[PrivacyEventRow]:
    """Return the budget's committed charges in commit order (as the ledger orders them)."""
    stmt = (
        select(PrivacyEventRow)
        .where(
            PrivacyEventRow.participant_id == budget.participant_id,
            PrivacyEventRow.asset_id == budget.asset_id,
            PrivacyEventRow.state == "committed",
        )
        .order_by(PrivacyEventRow.resolved_at, PrivacyEventRow.created_at, PrivacyEventRow.id)
    )
    return list(session.execute(stmt).scalars())


def _event(row: PrivacyEventRow) -> MechanismEvent:
    return MechanismEvent(
        noise_multiplier=row.noise_multiplier,
        sample_rate=row.sample_rate,
        steps=row.steps,
        delta=row.delta,
        max_grad_norm=row.max_grad_norm,
        mechanism=row.mechanism,
        sampler=row.sampler,
        versions={str(k): str(v) for k, v in (row.versions or {}).items()},
    )


def _decimal(name: str, value: object, *, allow_infinity: bool = False) -> Decimal:
    if isinstance(value, bool) or isinstance(value, float):
        raise EmpiricalAuditInvalid(f"{name}: {value!r} must be a Decimal or decimal string")
    if isinstance(value, int):
        value = Decimal(value)
    if isinstance(value, str):
        try:
            value = Decimal(value)
        except InvalidOperation:
            raise EmpiricalAuditInvalid(f"{name}: {value!r} is not a decimal") from None
    if not isinstance(value, Decimal):
        raise EmpiricalAuditInvalid(f"{name}: {value!r} must be a Decimal or decimal string")
    if value.is_nan() or (value.is_infinite() and not (allow_infinity and value > 0)):
        raise EmpiricalAuditInvalid(f"{name}: {value!r} must be finite")
    return value


@dataclass(frozen=True, kw_only=True)
class EmpiricalAudit:
    """The result of one empirical privacy audit of a participant's training.

    Attributes
    ----------
    participant, asset
        Whose budget the audited training was charged to.
    rounds_from, rounds_to
        Ledger round ids (``round_id`` of the committed charges, e.g. ``"r1"``)
        of the first and last round whose training the audit covers.
    canaries
        Number of canaries m (each included with probability 1/2).
    guesses, correct
        Membership guesses made (abstentions excluded) and how many were right;
        ``0 <= correct <= guesses <= canaries``.
    score
        Name of the membership score used (e.g. ``"loss"``).
    confidence
        Confidence of the lower bound, in (0, 1) (e.g. ``Decimal("0.95")``).
    delta
        Delta at which the bound holds, in [0, 1).
    epsilon_lower_bound
        The audit's lower bound on epsilon (>= 0, finite).
    epsilon_accounted
        The accountant's epsilon over the same rounds as the auditor saw it
        (>= 0; ``Infinity`` allowed). Checks compare against the ledger's own
        recomputation (:func:`accounted_epsilon_over`), not only this copy.
    method
        Name of the audit procedure (e.g. ``"steinke-nasr-jagielski-2023"``).

    Raises
    ------
    EmpiricalAuditInvalid
        On construction, when any field is malformed or inconsistent.
    """

    participant: str
    asset: str
    rounds_from: str
    rounds_to: str
    canaries: int
    guesses: int
    correct: int
    score: str
    confidence: Decimal
    delta: Decimal
    epsilon_lower_bound: Decimal
    epsilon_accounted: Decimal
    method: str

    def __post_init__(self) -> None:
        for name in ("participant", "asset", "rounds_from", "rounds_to"):
            try:
                check_id(name, getattr(self, name))
            except LedgerParameterInvalid as exc:
                raise EmpiricalAuditInvalid(exc.message) from None
        for name in ("score", "method"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _NAME.match(value):
                raise EmpiricalAuditInvalid(
                    f"{name}: {value!r} must be 1-64 characters of letters, digits, '._:@+/-'"
                )
        for name in _COUNTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise EmpiricalAuditInvalid(f"{name}: {value!r} must be an int")
        if not 1 <= self.canaries <= _MAX_CANARIES:
            raise EmpiricalAuditInvalid(
                f"canaries: {self.canaries} must be in [1, {_MAX_CANARIES}]"
            )
        if not 0 <= self.correct <= self.guesses <= self.canaries:
            raise EmpiricalAuditInvalid(
                f"guesses/correct: need 0 <= correct ({self.correct}) <= guesses "
                f"({self.guesses}) <= canaries ({self.canaries})"
            )
        for name in _DECIMALS:
            value = getattr(self, name)
            if not isinstance(value, Decimal):
                raise EmpiricalAuditInvalid(f"{name}: {value!r} must be a decimal.Decimal")
            _decimal(name, value, allow_infinity=name == "epsilon_accounted")
        if not 0 < self.confidence < 1:
            raise EmpiricalAuditInvalid(f"confidence: {self.confidence} must be in (0, 1)")
        if not 0 <= self.delta < 1:
            raise EmpiricalAuditInvalid(f"delta: {self.delta} must be in [0, 1)")
        for name in ("epsilon_lower_bound", "epsilon_accounted"):
            if getattr(self, name) < 0:
                raise EmpiricalAuditInvalid(f"{name}: {getattr(self, name)} must be >= 0")

    @property
    def subject(self) -> str:
        """Audit-log subject of the entry: ``participant:<id>``."""
        return f"participant:{self.participant}"

    @property
    def label(self) -> str:
        """Short label for displays, e.g. ``empirical lower bound (95%, 1000 canaries)``."""
        percent = (self.confidence * 100).normalize()
        shown = format(percent, "f")
        return f"empirical lower bound ({shown}%, {self.canaries} canaries)"

    def fields(self) -> dict[str, Any]:
        """Return the entry's fields as canonical JSON values (decimals as strings)."""
        out: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            out[name] = str(value) if isinstance(value, Decimal) else value
        return out


def audit_from_fields(fields: Mapping[str, object]) -> EmpiricalAudit:
    """Parse the fields of a ``budget.audited`` entry (decimals as strings).

    Raises
    ------
    EmpiricalAuditInvalid
        When a field is missing, extra, or malformed.
    """
    if not isinstance(fields, Mapping):
        raise EmpiricalAuditInvalid("fields: must be a mapping")
    missing = [n for n in _FIELDS if n not in fields]
    extra = sorted(str(n) for n in fields if n not in _FIELDS)
    if missing or extra:
        raise EmpiricalAuditInvalid(f"fields: missing {missing}, unexpected {extra}")
    values: dict[str, Any] = dict(fields)
    for name in _DECIMALS:
        raw = values[name]
        if not isinstance(raw, str):
            raise EmpiricalAuditInvalid(f"{name}: {raw!r} must be a decimal string")
        values[name] = _decimal(name, raw, allow_infinity=name == "epsilon_accounted")
    return EmpiricalAudit(**values)


@dataclass(frozen=True, kw_only=True)
class RecordedAudit:
    """An :class:`EmpiricalAudit` as read from the audit log.

    Attributes
    ----------
    index
        Entry index in the audit log (its Merkle leaf).
    time
        The entry's RFC 3339 UTC timestamp.
    audit
        The parsed audit.
    """

    index: int
    time: str
    audit: EmpiricalAudit


def _bind(source: LedgerHandle | Engine | Session) -> Engine | Session:
    if isinstance(source, Engine | Session):
        return source
    if isinstance(getattr(source, "engine", None), Engine):
        return source.engine
    raise LedgerParameterInvalid(
        f"source: expected a PrivacyLedger, Engine or Session, got {source!r}"
    )


def accounted_epsilon_over(
    ledger: LedgerHandle, participant: str, asset: str, rounds_from: str, rounds_to: str
) -> Decimal:
    """Return the ledger's epsilon of the committed charges from ``rounds_from`` to ``rounds_to``.

    The span runs, in commit order, from the first committed charge of round
    ``rounds_from`` to the last of ``rounds_to``, and is composed with the
    budget's own accountant and delta (rounded up, as every ledger epsilon).

    Raises
    ------
    BudgetNotSet
        No budget for this participant and asset.
    EmpiricalAuditInvalid
        Either round has no committed charge, or ``rounds_to`` precedes ``rounds_from``.
    """
    with Session(_engine_of(ledger)) as session:
        budget = _budget(session, participant, asset)
        committed = _committed(session, budget)
    labels = [r.round_id for r in committed]
    if rounds_from not in labels or rounds_to not in labels:
        raise EmpiricalAuditInvalid(
            f"rounds: {rounds_from!r}..{rounds_to!r} not both committed rounds of "
            f"participant {participant!r}, asset {asset!r} "
            f"(committed: {sorted(set(map(str, labels)))})"
        )
    first = labels.index(rounds_from)
    last = len(labels) - 1 - labels[::-1].index(rounds_to)
    if last < first:
        raise EmpiricalAuditInvalid(f"rounds: {rounds_to!r} was committed before {rounds_from!r}")
    events = [_event(r) for r in committed[first : last + 1]]
    return acc.epsilon(events, delta=budget.delta, accountant=budget.accountant)


def _record(ledger: LedgerHandle, audit: EmpiricalAudit, *, once: bool) -> tuple[int, bool]:
    engine = _engine_of(ledger)
    if not isinstance(audit, EmpiricalAudit):
        raise EmpiricalAuditInvalid(f"audit: expected an EmpiricalAudit, got {audit!r}")
    sink: AuditAppender | None = getattr(ledger, "_audit", None)
    if sink is None:
        raise EmpiricalAuditUnrecordable(
            "ledger: opened without an audit log; open it with audit=AuditLog(...) to record audits"
        )
    accounted_epsilon_over(  # refuses rounds the ledger never charged
        ledger, audit.participant, audit.asset, audit.rounds_from, audit.rounds_to
    )
    fields = audit.fields()
    with Session(engine) as session, session.begin():
        _budget(session, audit.participant, audit.asset, lock=True)
        if once:  # read under the budget's lock: two resends cannot both append
            for kept in empirical_audits(session, participant=audit.participant, asset=audit.asset):
                if kept.audit.fields() == fields:
                    return kept.index, False
        index = sink.append(session, event=AUDITED_EVENT, subject=audit.subject, fields=fields)
        checkpoint = getattr(sink, "checkpoint", None)
        if callable(checkpoint):
            checkpoint(session)
    return index, True


def record_empirical_audit(ledger: LedgerHandle, audit: EmpiricalAudit) -> int:
    """Append ``audit`` to the ledger's signed audit log as a ``budget.audited`` entry.

    The budget row is locked while the entry is written, and the audited
    rounds must be committed rounds of that budget.

    Parameters
    ----------
    ledger
        The budget service, opened with an audit log (``audit=AuditLog(...)``).
    audit
        The validated result.

    Returns
    -------
    int
        Index of the new entry in the audit log.

    Raises
    ------
    EmpiricalAuditInvalid
        ``audit`` is not an :class:`EmpiricalAudit`, or its rounds are not
        committed rounds of the budget.
    EmpiricalAuditUnrecordable
        The ledger has no audit log.
    BudgetNotSet
        No budget for the audit's participant and asset.
    """
    return _record(ledger, audit, once=False)[0]


def record_empirical_audit_once(ledger: LedgerHandle, audit: EmpiricalAudit) -> tuple[int, bool]:
    """Record ``audit`` as :func:`record_empirical_audit` does, unless it is already recorded.

    An entry of the same budget with exactly the same fields (the rounds, the
    figures, the stated accounted epsilon, decimals compared as written) is the
    same audit: its index is returned and nothing is appended. The check runs
    under the budget's lock, in the transaction that would append, so two
    copies of one request sent at once record one entry.

    Parameters
    ----------
    ledger
        The budget service, opened with an audit log (``audit=AuditLog(...)``).
    audit
        The validated result.

    Returns
    -------
    tuple[int, bool]
        Index of the entry, and whether this call appended it.

    Raises
    ------
    EmpiricalAuditInvalid, EmpiricalAuditUnrecordable, BudgetNotSet
        As :func:`record_empirical_audit`.
    """
    return _record(ledger, audit, once=True)


def empirical_audits(
    source: LedgerHandle | Engine | Session,
    *,
    participant: str | None = None,
    asset: str | None = None,
) -> list[RecordedAudit]:
    """Return every ``budget.audited`` entry in the audit log, in log order.

    Parameters
    ----------
    source
        The ledger, its engine, or an open session.
    participant, asset
        Keep only audits of this participant (and asset).

    Raises
    ------
    EmpiricalAuditInvalid
        A stored entry's fields do not parse (run ``secure-fed ledger verify``).
    """
    bind = _bind(source)
    stmt = (
        select(AuditEntryRow.entry_index, AuditEntryRow.entry)
        .where(AuditEntryRow.event == AUDITED_EVENT)
        .order_by(AuditEntryRow.entry_index)
    )
    if participant is not None:
        stmt = stmt.where(AuditEntryRow.subject == f"participant:{participant}")
    if isinstance(bind, Session):
        rows = list(bind.execute(stmt).all())
    else:
        with Session(bind) as session:
            rows = list(session.execute(stmt).all())
    out: list[RecordedAudit] = []
    for index, data in rows:
        try:
            entry = canonical.decode(data)
        except CanonicalJSONInvalid as exc:
            raise EmpiricalAuditInvalid(f"entry {index}: {exc.message}") from None
        found = audit_from_fields(entry.get("fields", {}))
        if asset is not None and found.asset != asset:
            continue
        out.append(RecordedAudit(index=int(index), time=str(entry.get("time", "")), audit=found))
    return out


def latest_empirical_audits(
    source: LedgerHandle | Engine | Session,
) -> dict[tuple[str, str], RecordedAudit]:
    """Return the newest ``budget.audited`` entry per (participant, asset).

    Raises
    ------
    EmpiricalAuditInvalid
        A stored entry's fields do not parse.
    """
    latest: dict[tuple[str, str], RecordedAudit] = {}
    for recorded in empirical_audits(source):
        latest[(recorded.audit.participant, recorded.audit.asset)] = recorded
    return latest


@dataclass(frozen=True, kw_only=True)
class AuditedBudget:
    """One budget's accounted epsilon beside its newest empirical audit, for displays.

    Attributes
    ----------
    participant, asset
        The budget.
    epsilon_spent
        The ledger's epsilon of the whole committed history.
    recorded
        The newest ``budget.audited`` entry of this budget, or ``None`` (not audited).
    epsilon_accounted
        The ledger's own epsilon over the audited rounds
        (:func:`accounted_epsilon_over`); ``None`` when not audited or when the
        audited rounds are no longer committed rounds of the budget.
    audits
        How many ``budget.audited`` entries this budget has.
    exceeding
        Entry indexes of every audit of this budget whose lower bound exceeds the
        ledger's epsilon over its rounds.
    unmatched
        Entry indexes of audits whose rounds have no committed charge of this
        budget (the writer refuses those, so only a changed ledger has any).
    """

    participant: str
    asset: str
    epsilon_spent: Decimal
    recorded: RecordedAudit | None
    epsilon_accounted: Decimal | None
    audits: int
    exceeding: tuple[int, ...] = ()
    unmatched: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        """The bound's label (``empirical lower bound (95%, m canaries)``) or ``not audited``."""
        return NOT_AUDITED if self.recorded is None else self.recorded.audit.label

    @property
    def bound(self) -> str:
        """The newest lower bound as a decimal string, or ``not audited``."""
        return (
            NOT_AUDITED if self.recorded is None else str(self.recorded.audit.epsilon_lower_bound)
        )

    @property
    def text(self) -> str:
        """One line for tables: ``0.41 (empirical lower bound (95%, 1000 canaries))``."""
        if self.recorded is None:
            return NOT_AUDITED
        return f"{self.bound} ({self.label})"

    @property
    def exceeds(self) -> bool | None:
        """Whether the newest bound exceeds the ledger's epsilon over its rounds (``None``: n/a)."""
        if self.recorded is None or self.epsilon_accounted is None:
            return None
        return self.recorded.audit.epsilon_lower_bound > self.epsilon_accounted


def _over(ledger: LedgerHandle, audit: EmpiricalAudit) -> Decimal | None:
    try:
        return accounted_epsilon_over(
            ledger, audit.participant, audit.asset, audit.rounds_from, audit.rounds_to
        )
    except LedgerError:
        return None


def audited_budgets(ledger: LedgerHandle, *, participant: str | None = None) -> list[AuditedBudget]:
    """Return every budget (of ``participant``) with its accounted epsilon and newest audit.

    Everything is read from the ledger: the epsilon from its committed charges,
    the audits from its signed ``budget.audited`` entries. Sorted by participant, asset.

    Raises
    ------
    EmpiricalAuditInvalid
        A stored audit entry's fields do not parse.
    """
    stmt = select(Budget).order_by(Budget.participant_id, Budget.asset_id)
    if participant is not None:
        stmt = stmt.where(Budget.participant_id == participant)
    spent: dict[tuple[str, str], Decimal] = {}
    with Session(_engine_of(ledger)) as session:
        for budget in session.execute(stmt).scalars():
            events = [_event(r) for r in _committed(session, budget)]
            key = (str(budget.participant_id), str(budget.asset_id))
            spent[key] = acc.epsilon(events, delta=budget.delta, accountant=budget.accountant)
    keys = list(spent)
    grouped: dict[tuple[str, str], list[RecordedAudit]] = {}
    for recorded in empirical_audits(ledger, participant=participant):
        grouped.setdefault((recorded.audit.participant, recorded.audit.asset), []).append(recorded)
    out: list[AuditedBudget] = []
    for key in keys:
        found = grouped.get(key, [])
        overs = [(r, _over(ledger, r.audit)) for r in found]
        exceeding = tuple(
            r.index for r, eps in overs if eps is not None and r.audit.epsilon_lower_bound > eps
        )
        unmatched = tuple(r.index for r, eps in overs if eps is None)
        newest, newest_over = overs[-1] if overs else (None, None)
        out.append(
            AuditedBudget(
                participant=key[0],
                asset=key[1],
                epsilon_spent=spent[key],
                recorded=newest,
                epsilon_accounted=newest_over,
                audits=len(found),
                exceeding=exceeding,
                unmatched=unmatched,
            )
        )
    return out
