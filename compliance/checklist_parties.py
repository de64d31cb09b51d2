"""Checklist item: every party's own audit log verifies and agrees with the ledger.

The key authority's and the helper's logs (:mod:`compliance.parties`) are read
from ``[parties] folder`` (a deployment folder), by default the ``secure-fed
deploy local`` folder the ledger's SQLite file lies in. Each must verify, and the
cross-check (:mod:`compliance.party_check`) must find no disagreement; a log the
deployment had that is missing fails the item, naming it.
"""

from __future__ import annotations

from compliance.checklist_base import Facts, Item, Outcome
from compliance.checklist_items import no_ledger
from compliance.errors import PartyLogsConfigInvalid
from compliance.parties import (
    PARTY_TITLES,
    discover_run_folder,
    read_party_logs,
    run_folder_sources,
)
from compliance.party_check import cross_check_parties, ledger_rounds

__all__ = ["PARTY_ITEMS"]

_SHOWN = 5


def _party_logs(f: Facts) -> Outcome:
    if f.engine is None:
        return no_ledger()
    folder = f.config.path("parties", "folder")
    if folder is None:
        folder = discover_run_folder(database_url=f.engine.url.render_as_string(False))
    if folder is None:
        return "manual", (
            "no party audit log found: set [parties] folder to the deployment folder holding "
            "the key authority's (and helper's) audit logs so they are verified and cross-checked"
        )
    try:
        read = read_party_logs(run_folder_sources(folder))
    except PartyLogsConfigInvalid as exc:
        return "fail", exc.message
    checks = cross_check_parties(read, ledger_rounds(f.engine))
    bad = [c for c in checks if c["agree"] is not True]
    if bad:
        shown = "; ".join(f"round {c['round']}: {c['detail']}" for c in bad[:_SHOWN])
        more = f" (and {len(bad) - _SHOWN} more)" if len(bad) > _SHOWN else ""
        return "fail", f"{len(bad)} party-log check(s) fail: {shown}{more}"
    logs = "; ".join(f"{PARTY_TITLES[log.party]}: {log.reason}" for log in read.logs)
    rounds = sum(1 for c in checks if c["rule"] == "counts per round")
    return "pass", f"{logs}; {rounds} round(s) cross-checked with the ledger, all agree"


#: Items about the other parties' audit logs.
PARTY_ITEMS: list[Item] = [
    Item(
        "parties.audit_logs",
        "Key authority and helper audit logs verify and agree with the ledger",
        True,
        _party_logs,
    ),
]
