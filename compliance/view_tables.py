"""Build the people's view of a report (:class:`~compliance.view.ReportView`) from its spools."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from compliance.chart import epsilon_chart
from compliance.export import ReportContext
from compliance.scope import NOT_RECORDED
from compliance.view import (
    RNG_NOTE,
    ReportView,
    Table,
    fill,
    hexgroups,
    rng_cell,
    round_label,
    sections_rows,
    short,
    text,
    when,
)
from compliance.view_parties import parties_fact, party_cell, party_tables
from privacy_ledger.budget.empirical import NOT_AUDITED

__all__ = ["build_view", "VERIFY_COMMANDS"]

#: Shown at the end of every human report: how to check the signed form.
VERIFY_COMMANDS = [
    "secure-fed audit export --format json --signing-key report-key.pem --out bundle.json",
    "secure-fed audit verify bundle.json --public-key report-pub.pem --log-public-key log-pub.pem",
]


def _facts(meta: dict[str, Any]) -> list[tuple[str, str]]:
    scope, log, cited, produced = meta["scope"], meta["log"], meta["cited"], meta["produced"]
    fed = meta["federation"]
    period = f"{scope['start'] or 'first entry'} to {scope['end'] or 'newest signed head'}"
    return [
        ("Federation (audit log origin)", fed["log_origin"]),
        ("Round namespaces", text(fed["round_namespaces"]) or NOT_RECORDED),
        ("Rounds by stage", text(fed["rounds_by_stage"]) or "none"),
        ("Participant", scope["participant"] or "whole federation"),
        ("Period (UTC, end exclusive)", period),
        ("Produced at (UTC)", produced["at"]),
        ("Produced by", produced["by"]),
        ("Tool", produced["tool"]),
        ("Report signer key (SM3)", hexgroups(produced["signer_fingerprint"])),
        (
            "Chain verification",
            f"{log['result']}: {log['size']} entries, {log['heads_checked']} signed heads checked",
        ),
        ("Merkle root (SM3)", hexgroups(log["root"])),
        (
            "Newest signed head",
            f"size {log['newest_head_size']}, root {hexgroups(log['newest_head_root'])}",
        ),
        ("Entries not yet under a signed head", str(log["unsigned_entries"])),
        (
            "Audit log key (SM3)",
            hexgroups(log["key_fingerprint"])
            + ("" if log["key_pinned"] else " (read from the database, not pinned)"),
        ),
        ("Party audit logs included", parties_fact(meta)),
        (
            "Cited entries",
            f"{cited['entries']} under the signed head of size "
            f"{cited['head_size']}"
            + (
                f", complete index range [{cited['range']['first']}, {cited['range']['end']})"
                if cited["complete"]
                else " (entries about the participant only)"
            ),
        ),
    ]


def _filing(spools: Any, max_rows: int) -> list[Table]:
    budget = Table(
        "budget",
        "DP parameter filing: budgets",
        [
            "participant",
            "asset",
            "accountant",
            "delta",
            "budget (epsilon)",
            "epsilon spent",
            "reserved",
            "remaining",
            "events",
        ],
        [14, 11, 8, 8, 10, 13, 12, 13, 7],
        intro="Epsilon recomputed from the signed log over the whole history "
        "(composition, rounded up), as of the end of the period.",
    )
    mech = Table(
        "mechanism",
        "DP parameter filing: mechanism",
        [
            "participant",
            "asset",
            "mechanism",
            "noise multiplier",
            "sample rate",
            "steps",
            "noise RNG",
            "privacy unit",
        ],
        [14, 11, 15, 16, 12, 7, 10, 15],
        intro=RNG_NOTE,
    )
    rows = list(spools.rows("dp_filing"))
    fill(
        budget,
        (
            [
                r["participant"],
                r["asset"],
                r["accountant"],
                r["delta"],
                r["epsilon_limit"],
                text(r["epsilon_spent"]),
                text(r["epsilon_reserved"]),
                text(r["epsilon_remaining"]),
                text(r["committed_events"]),
            ]
            for r in rows
        ),
        max_rows,
    )
    fill(
        mech,
        (
            [
                r["participant"],
                r["asset"],
                r["mechanism"],
                text(r["noise_multiplier"]),
                text(r["sample_rate"]),
                text(r["steps"]),
                rng_cell(r["secure_rng"]),
                r["privacy_unit"],
            ]
            for r in rows
        ),
        max_rows,
    )
    return [budget, mech, _empirical(rows, max_rows)]


#: Explains the empirical audit table (the same words in HTML and PDF).
EMPIRICAL_NOTE = (
    "A one-run empirical privacy audit (canaries, membership guesses) gives a lower bound "
    "on epsilon at the stated confidence; the accountant's epsilon is an upper bound. The "
    "bound is compared with the epsilon the signed log gives over the audited rounds: a "
    "bound above it means differential privacy was not applied as charged."
)


def _empirical_cells(r: dict[str, Any]) -> list[str]:
    audit = r.get("empirical_audit", NOT_AUDITED)
    head = [r["participant"], r["asset"], text(r["epsilon_spent"])]
    if not isinstance(audit, dict):
        return [*head, text(audit), "-", "-", "-"]
    exceeds = audit.get("exceeds_accounted")
    if exceeds is True:
        result = "EXCEEDS the accounted epsilon: DP not applied as charged"
    elif exceeds is False:
        result = "within the accounted epsilon"
    else:
        result = "not checkable: " + text(exceeds)
    if audit.get("exceeding") and exceeds is not True:
        result += f"; earlier audits exceed it (entries {text(audit['exceeding'])})"
    rounds = f"{round_label(audit.get('rounds_from'))} to {round_label(audit.get('rounds_to'))}"
    bound = f"{text(audit.get('epsilon_lower_bound'))} ({text(audit.get('label'))})"
    return [*head, bound, rounds, text(audit.get("epsilon_accounted")), result]


def _empirical(rows: list[dict[str, Any]], max_rows: int) -> Table:
    table = Table(
        "empirical",
        "DP parameter filing: empirical privacy audits",
        [
            "participant",
            "asset",
            "epsilon spent",
            "empirical lower bound",
            "audited rounds",
            "accounted over them",
            "result",
        ],
        [13, 10, 11, 22, 12, 11, 17],
        intro=EMPIRICAL_NOTE,
    )
    return fill(table, (_empirical_cells(r) for r in rows), max_rows)


def _events(spools: Any, max_rows: int) -> Table:
    table = Table(
        "events",
        "Committed privacy events",
        [
            "time",
            "round",
            "participant",
            "noise multiplier",
            "sample rate",
            "steps",
            "clip norm",
            "noise RNG",
        ],
        [20, 8, 14, 14, 11, 8, 12, 10],
        intro=RNG_NOTE,
    )
    return fill(
        table,
        (
            [
                when(r["time"]),
                round_label(r["round"]),
                r["participant"],
                short(r["noise_multiplier"]),
                short(r["sample_rate"]),
                text(r["steps"]),
                short(r["max_grad_norm"]),
                rng_cell(r["secure_rng"]),
            ]
            for r in spools.rows("mechanism_events")
        ),
        max_rows,
    )


def _outliers(spools: Any, max_rows: int) -> Table:
    table = Table(
        "outliers",
        "Outlier decisions",
        [
            "round",
            "participant",
            "score",
            "thresholds (down / exclude)",
            "action",
            "factor",
            "applied weight",
        ],
        [8, 16, 12, 22, 11, 10, 15],
    )
    return fill(
        table,
        (
            [
                text(r["round"]),
                text(r["participant"]),
                short(r["score"]),
                f"{short(r['downweight_threshold'])} / {short(r['exclude_threshold'])}",
                text(r["action"]),
                short(r["factor"]),
                short(r["applied_weight"]),
            ]
            for r in spools.rows("outlier_decisions")
        ),
        max_rows,
    )


def _openings(spools: Any) -> Iterator[list[str]]:
    for r in sections_rows(spools, "decryptions", "decryption_requests", "party_decryptions"):
        if r.get("source") == "ledger table decryption_requests":
            kind = f"{r['kind']} (ledger table)"
            yield [
                when(r["time"]),
                round_label(r["round"]),
                kind,
                r["what"],
                text(r["aggregate_size"]),
                NOT_RECORDED,
                NOT_RECORDED,
                r["requester"],
            ]
        else:
            yield [
                when(r["time"]),
                round_label(r["round"]),
                r["event"],
                text(r["purpose"]),
                text(r["shape"]),
                text(r["contributors"]),
                party_cell(r),
                text(r["requester"]) + (f"; {r['reason']}" if r["reason"] != NOT_RECORDED else ""),
            ]


def _egress(spools: Any) -> Iterator[list[str]]:
    logged = set()
    for r in spools.rows("egress"):
        logged.add((str(r["participant"]), str(r["digest"])))
        yield [
            when(r["time"]),
            text(r["round"]),
            text(r["participant"]),
            text(r["kind"]),
            text(r["shape"]),
            text(r["bytes"]),
            hexgroups(r["digest"]),
            f"audit log, {r['status']}",
        ]
    for r in spools.rows("uploads"):
        if (r["participant"], r["digest"]) not in logged:
            yield [
                when(r["time"]),
                r["round"],
                r["participant"],
                r["kind"],
                text(r["shape"]),
                text(r["bytes"]),
                hexgroups(r["digest"]),
                "ledger table",
            ]


def _misc(spools: Any, max_rows: int) -> list[Table]:
    refusals = Table(
        "refusals",
        "Refusals (budget and access)",
        ["time", "event", "subject", "detail"],
        [20, 14, 22, 44],
    )
    fill(
        refusals,
        (
            [when(r["time"]), r["event"], r["subject"], text(r["detail"])]
            for r in spools.rows("refusals")
        ),
        max_rows,
    )
    cross = Table(
        "cross",
        "Cross-check: signed log against ledger tables",
        ["participant", "asset", "item", "audit log", "ledger tables", "agree"],
        [18, 14, 16, 20, 20, 12],
    )
    fill(
        cross,
        (
            [
                r["participant"],
                r["asset"],
                r["item"],
                r["audit_log"],
                r["ledger_tables"],
                text(r["agree"]),
            ]
            for r in spools.rows("cross_check")
        ),
        max_rows,
    )
    return [refusals, cross]


def build_view(ctx: ReportContext) -> ReportView:
    """Return the people's view of the collected report in ``ctx``."""
    spools, n = ctx.collected.spools, ctx.max_rows
    people = Table(
        "participants",
        "Participants and their keys",
        ["participant", "institution", "kind", "status", "assets", "SM2 key fingerprint (SM3)"],
        [14, 16, 8, 8, 14, 40],
    )
    fill(
        people,
        (
            [
                r["participant"],
                r["institution"],
                r["kind"],
                r["status"],
                text(r["assets"]),
                hexgroups(r["key_fingerprint"]),
            ]
            for r in spools.rows("participants")
        ),
        n,
    )
    openings = fill(
        Table(
            "openings",
            "Decryption and opening log",
            [
                "time",
                "round",
                "event",
                "purpose",
                "size (shape)",
                "contributors",
                "released by",
                "requester",
            ],
            [19, 7, 17, 11, 11, 10, 13, 12],
            intro="Who opened what: every decryption or share opening requested, released "
            "or refused, with the number of contributors, from the ledger's log and from the "
            "key authority's and helper's own logs (marked with their source).",
        ),
        _openings(spools),
        n,
    )
    egress = fill(
        Table(
            "egress",
            "Data egress evidence (payloads that left a participant)",
            [
                "time",
                "round",
                "participant",
                "kind",
                "shape",
                "bytes",
                "digest (hex, SM3)",
                "source",
            ],
            [17, 12, 12, 9, 9, 8, 22, 11],
            intro="Digests and sizes only: the payloads themselves are never stored.",
        ),
        _egress(spools),
        n,
    )
    limits = {(r["participant"], r["asset"]): r["epsilon_limit"] for r in spools.rows("dp_filing")}
    tables = [
        people,
        *_filing(spools, n),
        _events(spools, n),
        _outliers(spools, n),
        openings,
        egress,
        *_misc(spools, n),
        *party_tables(spools, n),
    ]
    scope = ctx.meta["scope"]
    title = f"Audit report: {scope['participant'] or ctx.meta['federation']['log_origin']}"
    return ReportView(
        title=title,
        facts=_facts(ctx.meta),
        tables=tables,
        chart_png=epsilon_chart(spools.rows("epsilon_series"), limits),
        verify_commands=VERIFY_COMMANDS,
    )
