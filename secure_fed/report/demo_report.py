"""``report.html`` of a demo run: charts and per-round tables from ``results.json``.

The page is rendered from the results dictionary the demo writes
(:meth:`secure_fed.demo.DemoResults.to_dict`) with a Jinja2 template shipped
in ``secure_fed/report/templates``, autoescaped. Charts are PNG images
embedded as ``data:`` URIs, so the file is self-contained and carries no
script; it reads the same offline, in a browser or attached to a ticket.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from secure_fed.report.charts import CHARTS, has_values, line_chart
from secure_fed.report.weights import (
    applied_decision,
    cap_text,
    copies_text,
    is_downweighted,
    product,
    threshold_text,
)

__all__ = ["render_demo_report", "write_demo_report"]


def _pct(value: object) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, int | float) else "-"


def _num(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else "-"


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
    return env.get_template("demo_report.html.j2").render(r=results, charts=charts, binary=binary)


def write_demo_report(results: dict[str, Any], path: Path) -> Path:
    """Render ``results`` into ``path`` (UTF-8) and return ``path``."""
    path.write_text(render_demo_report(results), encoding="utf-8")
    return path
