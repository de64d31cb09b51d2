"""``report.html`` of a demo run: charts and per-round tables from ``results.json``.

The page is rendered from the results dictionary the demo writes
(:meth:`secure_fed.demo.DemoResults.to_dict`) with a Jinja2 template shipped
in ``secure_fed/report/templates``, autoescaped. Charts are PNG images
embedded as ``data:`` URIs, so the file is self-contained and carries no
script; it reads the same offline, in a browser or attached to a ticket.

Beside each participant's accounted epsilon the page shows the newest empirical
lower bound of its one-run privacy audit, labelled "empirical lower bound (95%, m
canaries)", or "not audited": both as the demo read them back from the ledger
(``budgets`` and ``privacy.empirical_audit`` of ``results.json``, the latter the
signed ``budget.audited`` entries, :func:`empirical_rows`).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from privacy_ledger.budget.empirical import NOT_AUDITED, audit_from_fields
from privacy_ledger.errors import LedgerError
from secure_fed.report.charts import CHARTS, has_values, line_chart
from secure_fed.report.weights import (
    applied_decision,
    cap_text,
    copies_text,
    is_downweighted,
    product,
    threshold_text,
)

__all__ = ["empirical_rows", "render_demo_report", "write_demo_report"]


def _pct(value: object) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, int | float) else "-"


def _num(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


def empirical_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Return one row per participant: accounted epsilon beside its empirical lower bound.

    ``results["budgets"]`` gives the epsilon spent and ``results["privacy"]
    ["empirical_audit"]`` the newest ``budget.audited`` entry's fields per
    participant (both read from the ledger by the demo). A participant without
    an entry, or a run without the audit, shows ``not audited``.
    """
    budgets = results.get("budgets") or {}
    audits = (results.get("privacy") or {}).get("empirical_audit") or {}
    rows = []
    for pid in sorted(set(budgets) | set(audits)):
        spent = (budgets.get(pid) or {}).get("spent")
        row: dict[str, Any] = {"participant": pid, "spent": spent, "bound": NOT_AUDITED}
        fields = audits.get(pid)
        if isinstance(fields, dict):
            try:
                audit = audit_from_fields({k: v for k, v in fields.items() if k != "entry"})
            except LedgerError as exc:
                row["bound"] = f"unreadable audit ({exc.code})"
            else:
                rounds = (audit.rounds_from, audit.rounds_to)
                row.update(
                    bound=f"{audit.epsilon_lower_bound} ({audit.label})",
                    rounds=rounds[0] if rounds[0] == rounds[1] else f"{rounds[0]} to {rounds[1]}",
                    accounted=str(audit.epsilon_accounted),
                    exceeds=audit.epsilon_lower_bound > audit.epsilon_accounted,
                    entry=fields.get("entry"),
                )
        rows.append(row)
    return rows


def render_demo_report(results: dict[str, Any]) -> str:
    """Return the HTML page for ``results`` (the ``results.json`` dictionary)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(
        loader=PackageLoader("secure_fed.report", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
    )
    env.filters["pct"] = _pct
    env.filters["num"] = _num
    for helper in (applied_decision, cap_text, copies_text, is_downweighted, product):
        env.filters[helper.__name__] = helper
    env.filters["threshold_text"] = threshold_text
    rounds = results.get("rounds", [])
    limit = results.get("privacy", {}).get("epsilon_budget")
    budget = float(limit) if isinstance(limit, int | float) else None
    charts = [
        {
            "title": title,
            "src": "data:image/png;base64,"
            + base64.b64encode(
                line_chart(rounds, key, budget=budget if key == "epsilon" else None)
            ).decode("ascii"),
        }
        for key, title, _, _ in CHARTS
        if has_values(rounds, key)
    ]
    binary = has_values(rounds, "roc_auc")
    return env.get_template("demo_report.html.j2").render(
        r=results, charts=charts, binary=binary, empirical=empirical_rows(results)
    )


def write_demo_report(results: dict[str, Any], path: Path) -> Path:
    """Render ``results`` into ``path`` (UTF-8) and return ``path``."""
    path.write_text(render_demo_report(results), encoding="utf-8")
    return path
