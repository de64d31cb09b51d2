"""Report sections derived from audit entries, the same way at export and at verification.

:class:`Deriver` is fed parsed audit entries in index order and emits the rows
of the log-backed report sections through a sink, as it goes (no section is
held in memory). The exporter feeds it the entries it reads from the
database and writes the rows into the bundle; the offline verifier feeds it
the entries cited in a bundle and compares what comes out with the bundle's
sections. A row therefore says exactly what its entry records; a value the
entry does not carry is :data:`~compliance.scope.NOT_RECORDED`.

Sections (one row per entry, in index order unless noted):

``mechanism_events``
    each committed privacy reservation with the mechanism inputs it reserved;
``outlier_decisions``
    ``outlier.decision``: round, participant, score, thresholds, action, factor;
``decryptions``
    ``decryption.requested``/``released`` and decryption refusals (``access.denied``
    written by the key authority or helper);
``egress``
    ``upload.received`` and ``upload.rejected``: what left a participant;
``refusals``
    ``budget.refused`` and other ``access.denied`` entries;
``dp_filing`` and ``epsilon_series``
    one row per participant asset, computed when the feed ends
    (:mod:`compliance.budgets`); a filing row's ``empirical_audit`` is the newest
    ``budget.audited`` entry of that asset (subject ``participant:<id>``, asset in
    its fields) beside the epsilon the commits give over its rounds, or "not audited".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compliance.budgets import BudgetTrack
from compliance.scope import NOT_RECORDED, Scope
from privacy_ledger.budget.empirical import AUDITED_EVENT

__all__ = ["Deriver", "ROW_SECTIONS", "SUMMARY_SECTIONS", "SECTIONS", "RowSink"]

#: Sections streamed row by row while entries are fed.
ROW_SECTIONS = ("mechanism_events", "outlier_decisions", "decryptions", "egress", "refusals")
#: Sections computed once every entry is fed.
SUMMARY_SECTIONS = ("dp_filing", "epsilon_series")
#: Every log-backed section, in bundle order.
SECTIONS = SUMMARY_SECTIONS + ROW_SECTIONS

RowSink = Callable[[str, dict[str, Any]], None]

_DECRYPTION_PARTIES = ("key_authority", "helper")


def _get(fields: dict[str, Any], *names: str) -> object:
    for name in names:
        if name in fields:
            return fields[name]
    return NOT_RECORDED


def _budget_key(subject: str) -> tuple[str, str] | None:
    head, _, tail = subject.partition("/")
    if not head.startswith("participant:") or not tail.startswith("asset:"):
        return None
    return head.removeprefix("participant:"), tail.removeprefix("asset:")


def _key(event: str, subject: str, fields: dict[str, Any]) -> tuple[str, str] | None:
    """Return the budget an entry belongs to: from its subject, or an audit's fields."""
    if event != AUDITED_EVENT:
        return _budget_key(subject)
    participant, asset = fields.get("participant"), fields.get("asset")
    if subject != f"participant:{participant}" or not isinstance(asset, str) or not asset:
        return None
    return str(participant), asset


def _outlier(index: int, time: str, f: dict[str, Any]) -> dict[str, Any]:
    return {
        "entry": index,
        "time": time,
        "round": _get(f, "round_id", "round"),
        "participant": _get(f, "participant_id", "participant"),
        "score": _get(f, "score"),
        "smoothed": _get(f, "smoothed"),
        "downweight_threshold": _get(f, "downweight_threshold"),
        "exclude_threshold": _get(f, "exclude_threshold"),
        "action": _get(f, "action"),
        "factor": _get(f, "factor"),
        "applied_weight": _get(f, "applied_weight", "weight"),
    }


def _decryption(index: int, time: str, event: str, f: dict[str, Any]) -> dict[str, Any]:
    return {
        "entry": index,
        "time": time,
        "event": event,
        "round": _get(f, "round_id", "round"),
        "purpose": _get(f, "purpose"),
        "shape": _get(f, "shape"),
        "contributors": _get(f, "contributors"),
        "participants": _get(f, "participant_ids"),
        "party": _get(f, "party"),
        "requester": _get(f, "requester"),
        "central_dp": _get(f, "central_dp"),
        "reason": _get(f, "reason"),
    }


def _egress(index: int, time: str, event: str, f: dict[str, Any]) -> dict[str, Any]:
    return {
        "entry": index,
        "time": time,
        "source": "audit log",
        "status": "accepted" if event == "upload.received" else "rejected",
        "round": _get(f, "round_id", "round"),
        "participant": _get(f, "participant_id", "participant"),
        "kind": _get(f, "kind", "mode"),
        "shape": _get(f, "shape"),
        "bytes": _get(f, "size", "bytes"),
        "digest": _get(f, "digest"),
        "reason": _get(f, "code", "reason"),
    }


class Deriver:
    """Derive the log-backed report sections from entries fed in index order.

    Parameters
    ----------
    scope
        What the report covers; entries outside it contribute nothing.
    sink
        Called as ``sink(section, row)`` for each row of :data:`ROW_SECTIONS`.
    """

    def __init__(self, *, scope: Scope, sink: RowSink) -> None:
        self.scope = scope
        self._sink = sink
        self._budgets: dict[tuple[str, str], BudgetTrack] = {}

    def wants(self, entry: dict[str, Any]) -> bool:
        """Whether ``entry`` contributes to the report (the exporter cites those)."""
        return self._role(entry) is not None

    def _role(self, entry: dict[str, Any]) -> str | None:
        event, subject, time = entry["event"], entry["subject"], entry["time"]
        fields = entry["fields"] if isinstance(entry["fields"], dict) else {}
        if not self.scope.about(subject, fields):
            return None
        if event.startswith("budget.") and _key(event, subject, fields) is not None:
            return "budget" if self.scope.before_end(time) else None
        return "period" if self.scope.in_period(time) else None

    def feed(self, index: int, entry: dict[str, Any]) -> None:
        """Derive the rows of one parsed entry (entries must come in index order)."""
        role = self._role(entry)
        if role is None:
            return
        event, time = entry["event"], entry["time"]
        fields = entry["fields"] if isinstance(entry["fields"], dict) else {}
        if role == "budget":
            key = _key(event, entry["subject"], fields)
            assert key is not None
            track = self._budgets.setdefault(key, BudgetTrack(participant=key[0], asset=key[1]))
            row = track.apply(event, fields, index)
            if row is not None and self.scope.in_period(time):
                self._sink("mechanism_events", {**row, "time": time})
            if event == "budget.refused" and self.scope.in_period(time):
                self._refusal(index, entry, fields)
            return
        self._period_row(index, entry, fields)

    def _period_row(self, index: int, entry: dict[str, Any], fields: dict[str, Any]) -> None:
        event, time = entry["event"], entry["time"]
        if event == "outlier.decision":
            self._sink("outlier_decisions", _outlier(index, time, fields))
        elif event.startswith("decryption.") or (
            event == "access.denied" and fields.get("party") in _DECRYPTION_PARTIES
        ):
            self._sink("decryptions", _decryption(index, time, event, fields))
        elif event in ("upload.received", "upload.rejected"):
            self._sink("egress", _egress(index, time, event, fields))
        elif event == "access.denied":
            self._refusal(index, entry, fields)

    def _refusal(self, index: int, entry: dict[str, Any], fields: dict[str, Any]) -> None:
        self._sink(
            "refusals",
            {
                "entry": index,
                "time": entry["time"],
                "event": entry["event"],
                "subject": entry["subject"],
                "detail": fields,
            },
        )

    def finish(self) -> dict[str, list[dict[str, Any]]]:
        """Return the summary sections (one row per participant asset, sorted)."""
        tracks = [self._budgets[k] for k in sorted(self._budgets)]
        return {
            "dp_filing": [t.filing() for t in tracks],
            "epsilon_series": [t.series() for t in tracks],
        }
