"""HTML rendering of a report: a Jinja2 template shipped with the package, chart inline.

The page is self-contained (CSS inline, the epsilon chart embedded as a
``data:`` PNG), autoescaped, sized for A4 print (``@page``), and streamed to
disk with ``Template.generate`` so a large report is never held as one string.
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING

from compliance.scope import NOT_RECORDED

if TYPE_CHECKING:
    from compliance.export import ReportContext

__all__ = ["write_html"]

TEMPLATE = "report.html.j2"


def write_html(ctx: ReportContext) -> None:
    """Render the report in ``ctx`` to ``ctx.out`` as one HTML file."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    from compliance.view_tables import build_view

    view = build_view(ctx)
    env = Environment(
        loader=PackageLoader("compliance", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=False,
    )
    chart = base64.b64encode(view.chart_png).decode("ascii") if view.chart_png else None
    stream = env.get_template(TEMPLATE).generate(view=view, chart=chart, not_recorded=NOT_RECORDED)
    partial = ctx.out.with_name(ctx.out.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            for piece in stream:
                handle.write(piece)
        os.replace(partial, ctx.out)
    finally:
        partial.unlink(missing_ok=True)
