"""Cross-check the party logs against each other and against the ledger, round by round.

What must agree (each rule a row of section ``party_cross_check``; ``agree``
false is a disagreement that ``secure-fed audit export`` and the REST export
refuse, and a checklist FAIL):

1. within the key authority's log, every ``decryption.released`` (but the copies
   step's counts, which have no request of their own) follows a
   ``decryption.requested`` of its round, purpose and contributors;
2. every decryption event the ledger's own log records for the key authority or
   the helper is in that party's log too (same round, purpose and event), and
   the ledger's ``decryption_requests`` rows of a round are no more than the
   releases the party logs record for it;
3. a round the ledger stores as ``published`` has at least one release in the
   party logs (nothing is published without a decryption or opening);
4. the reverse: every round a party log releases for is a round the ledger
   stores (by its id or its protocol number).

Nothing is checked against a party whose log was not included; an expected log
that is missing or does not verify is itself a disagreement (a row saying so).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, and_, not_, or_, select

from compliance.collect import snapshot
from compliance.parties import PARTY_TITLES, PartyRead
from compliance.scope import NOT_RECORDED
from privacy_ledger.audit import canonical
from privacy_ledger.audit.models import AuditEntryRow
from privacy_ledger.models import DecryptionRequestRow, RoundRow

__all__ = ["LedgerRounds", "cross_check_parties", "ledger_rounds"]

_RELEASED, _REQUESTED, _DENIED = "decryption.released", "decryption.requested", "access.denied"


@dataclass(frozen=True)
class LedgerRounds:
    """What the ledger says about rounds and decryptions."""

    stages: dict[str, str]
    numbers: dict[str, str]
    claimed: list[tuple[str, str, str, str]]
    table_rows: Counter[str]

    def key(self, round_id: object) -> str:
        """Return the ledger round id a party's round number names (else the number)."""
        text = str(round_id)
        return self.numbers.get(text, text)


def ledger_rounds(engine: Engine) -> LedgerRounds:
    """Read the ledger's rounds, its logged decryption events and its decryption rows."""
    wanted = or_(
        AuditEntryRow.event.startswith("decryption."),
        and_(AuditEntryRow.event == _DENIED, not_(AuditEntryRow.subject.startswith("api:"))),
    )
    with snapshot(engine) as session:
        stages, numbers = {}, {}
        number = RoundRow.state["config"]["round_id"].as_string()  # not the whole state
        for rid, stage, value in session.execute(select(RoundRow.id, RoundRow.stage, number)):
            stages[str(rid)] = str(stage)
            if value is not None and str(value) != rid:
                numbers[str(value)] = str(rid)
        claimed = []
        for (data,) in session.execute(select(AuditEntryRow.entry).where(wanted)):
            entry = canonical.decode(data)
            f = entry["fields"] if isinstance(entry.get("fields"), dict) else {}
            if f.get("party") in PARTY_TITLES:
                claimed.append(
                    (str(f["party"]), str(f.get("round_id")), str(f.get("purpose")), entry["event"])
                )
        table = Counter(str(r) for r in session.scalars(select(DecryptionRequestRow.round_id)))
    return LedgerRounds(stages=stages, numbers=numbers, claimed=claimed, table_rows=table)


def _row(
    round_key: str, rule: str, agree: bool, detail: str, ledger: LedgerRounds
) -> dict[str, Any]:
    return {
        "round": round_key,
        "ledger_stage": ledger.stages.get(round_key, "not stored"),
        "rule": rule,
        "agree": agree,
        "detail": detail,
    }


def _requests_precede(read: PartyRead, ledger: LedgerRounds) -> list[dict[str, Any]]:
    open_: Counter[tuple[str, str, str]] = Counter()
    orphans: Counter[str] = Counter()
    for r in read.decryptions:
        if r["log"] != "key_authority":
            continue
        key = (str(r["round"]), str(r["purpose"]), json.dumps(r["participants"]))
        if r["event"] == _REQUESTED:
            open_[key] += 1
        elif r["event"] == _RELEASED and r["step"] == NOT_RECORDED:
            if open_[key] > 0:
                open_[key] -= 1
            else:
                orphans[ledger.key(r["round"])] += 1
    return [
        _row(k, "released only on request", False,
             f"the key authority's log records {n} release(s) with no request before them", ledger)
        for k, n in sorted(orphans.items())
    ]  # fmt: skip


def _ledger_claims(read: PartyRead, ledger: LedgerRounds) -> list[dict[str, Any]]:
    rows = []
    have = Counter(
        (r["log"], ledger.key(r["round"]), str(r["purpose"]), r["event"]) for r in read.decryptions
    )
    claims = Counter((p, ledger.key(rnd), purpose, e) for p, rnd, purpose, e in ledger.claimed)
    for (party, rnd, purpose, event), n in sorted(claims.items()):
        if not read.included(party):
            continue
        found = have[(party, rnd, purpose, event)]
        if found < n:
            detail = (
                f"the ledger's log records {n} {event} ({purpose}) by the "
                f"{PARTY_TITLES[party]}, whose log records {found}"
            )
            rows.append(_row(rnd, "ledger's claims recorded by the party", False, detail, ledger))
    return rows


def _per_round(read: PartyRead, ledger: LedgerRounds) -> list[dict[str, Any]]:
    released: Counter[str] = Counter()
    counts: dict[str, Counter[str]] = {}
    for r in read.decryptions:
        rnd = ledger.key(r["round"])
        kind = {"decryption.requested": "requested", _RELEASED: "released"}.get(
            r["event"], "refused"
        )
        counts.setdefault(rnd, Counter())[f"{PARTY_TITLES[r['log']]} {kind}"] += 1
        if r["event"] == _RELEASED:
            released[rnd] += 1
    rows = []
    for rnd in sorted(set(counts) | {k for k, s in ledger.stages.items() if s == "published"}):
        stage = ledger.stages.get(rnd)
        text = (
            ", ".join(f"{k} {v}" for k, v in sorted(counts.get(rnd, Counter()).items())) or "none"
        )
        table = ledger.table_rows.get(rnd, 0)
        problems = []
        if stage is None:
            problems.append("the ledger stores no such round")
        if stage == "published" and released[rnd] == 0:
            problems.append("published in the ledger, but no party log records a release for it")
        if table > released[rnd]:
            problems.append(f"the ledger's decryption_requests hold {table} row(s) for it")
        detail = f"party logs: {text}" + ("; " + "; ".join(problems) if problems else "")
        rows.append(_row(rnd, "counts per round", not problems, detail, ledger))
    return rows


def cross_check_parties(read: PartyRead, ledger: LedgerRounds) -> list[dict[str, Any]]:
    """Return the ``party_cross_check`` rows (see the module docstring)."""
    rows = [
        _row(NOT_RECORDED, "party log included", False,
             f"the {PARTY_TITLES[log.party]}'s log ({log.location}) is {log.status}: {log.reason}",
             ledger)
        for log in read.logs
        if not log.included
    ]  # fmt: skip
    if not any(log.included for log in read.logs):
        return rows
    return [
        *rows,
        *_requests_precede(read, ledger),
        *_ledger_claims(read, ledger),
        *_per_round(read, ledger),
    ]
