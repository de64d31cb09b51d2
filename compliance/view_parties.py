"""The report's tables of the other parties' own audit logs (key authority, helper)."""

from __future__ import annotations

from typing import Any

from compliance.view import Table, fill, hexgroups, text, when

__all__ = ["parties_fact", "party_cell", "party_tables"]


def party_cell(r: dict[str, Any]) -> str:
    """Who released or refused: the party, and whether its own log is the source."""
    if "log" not in r:
        return text(r["party"])
    cell = f"{text(r['party']).replace('_', ' ')} (own log)"
    return cell if r.get("signed_head", True) else f"{cell}; after its newest signed head"


def parties_fact(meta: dict[str, Any]) -> str:
    """Say which party logs the report includes, which not (and why), and from where."""
    parties = meta["federation"].get("party_logs") or {}
    included = [p.replace("_", " ") for p in parties.get("included", [])]
    missing = [
        f"{p.replace('_', ' ')} ({why})" for p, why in parties.get("not_included", {}).items()
    ]
    text_ = ", ".join(included) or "none"
    if missing:
        text_ += "; not included: " + "; ".join(missing)
    return f"{text_} (from {parties.get('configured_from', 'none configured')})"


def party_tables(spools: Any, max_rows: int) -> list[Table]:
    """Return the tables of the party logs: the logs read, their cross-check, their events."""
    logs = Table(
        "party_logs",
        "Party audit logs (key authority, helper)",
        ["party", "database", "status", "entries", "newest signed head", "key (SM3)", "reason"],
        [10, 20, 9, 7, 8, 20, 26],
        intro="Each party's own log, verified like the ledger's (hash chain, Merkle roots, "
        "every signed head under the party's key); a log that does not verify contributes no row.",
    )
    fill(
        logs,
        (
            [
                r["party"].replace("_", " "),
                r["location"],
                r["status"],
                text(r["entries"]),
                text(r["newest_head_size"]),
                hexgroups(r["key_fingerprint"]),
                r["reason"],
            ]
            for r in spools.rows("party_logs")
        ),
        max_rows,
    )
    cross = Table(
        "party_cross",
        "Cross-check: party logs against each other and the ledger",
        ["round", "ledger stage", "rule", "agree", "detail"],
        [14, 10, 18, 7, 51],
    )
    fill(
        cross,
        (
            [r["round"], r["ledger_stage"], r["rule"], text(r["agree"]), r["detail"]]
            for r in spools.rows("party_cross_check")
        ),
        max_rows,
    )
    events = Table(
        "party_events",
        "Party log events: policy pinned, plans installed, services started",
        ["time", "party", "event", "round", "detail"],
        [20, 12, 16, 8, 44],
    )
    fill(
        events,
        (
            [
                when(r["time"]),
                r["log"].replace("_", " "),
                r["event"],
                text(r["round"]),
                text(r["detail"]),
            ]
            for r in spools.rows("party_events")
        ),
        max_rows,
    )
    return [logs, cross, events]
