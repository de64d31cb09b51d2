"""PDF rendering of a report with ReportLab (pure Python: no system libraries needed).

A4 portrait, 15 mm margins; every table's columns are fractions of the text
width and every cell is a wrapping paragraph, so nothing runs off the page.
Header rows repeat on each page. The text is set in DejaVu Sans (embedded,
taken from matplotlib's bundled fonts), so the PDF's text extracts cleanly
and Greek letters print. The epsilon chart is embedded as a PNG image.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

from compliance.scope import NOT_RECORDED

if TYPE_CHECKING:
    from compliance.export import ReportContext
    from compliance.view import ReportView, Table

__all__ = ["write_pdf"]

_CHUNK = 250  # rows per ReportLab table (long tables split much faster in pieces)
_FONT, _BOLD, _MONO = "DejaVuSans", "DejaVuSans-Bold", "DejaVuSansMono"


def _fonts() -> None:
    import matplotlib
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont

    if _FONT in pdfmetrics.getRegisteredFontNames():
        return
    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    for name in (_FONT, _BOLD, _MONO):
        pdfmetrics.registerFont(TTFont(name, str(folder / f"{name}.ttf")))


def _styles() -> dict[str, Any]:
    from reportlab.lib.colors import HexColor
    from reportlab.lib.styles import ParagraphStyle

    base = ParagraphStyle("base", fontName=_FONT, fontSize=8.5, leading=10.5)
    return {
        "title": ParagraphStyle("title", parent=base, fontName=_BOLD, fontSize=15, leading=19),
        "h2": ParagraphStyle(
            "h2",
            parent=base,
            fontName=_BOLD,
            fontSize=11,
            leading=14,
            spaceBefore=9,
            spaceAfter=3,
            keepWithNext=1,
        ),
        "body": base,
        "note": ParagraphStyle("note", parent=base, textColor=HexColor("#333333")),
        "cell": ParagraphStyle("cell", parent=base, fontSize=7.2, leading=8.6),
        "na": ParagraphStyle(
            "na", parent=base, fontSize=7.2, leading=8.6, textColor=HexColor("#aa4400")
        ),
        "head": ParagraphStyle("head", parent=base, fontName=_BOLD, fontSize=7.2, leading=8.6),
        "code": ParagraphStyle("code", parent=base, fontName=_MONO, fontSize=7.2, leading=9),
    }


def _grid(data: list[list[Any]], widths: list[float]) -> Any:
    from reportlab.lib.colors import HexColor
    from reportlab.platypus import Table as RLTable
    from reportlab.platypus import TableStyle

    table = RLTable(data, colWidths=widths, repeatRows=1)
    table.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.4, HexColor("#bbbbbb")),
                ("BACKGROUND", (0, 0), (-1, 0), HexColor("#eeeeee")),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("LEFTPADDING", (0, 0), (-1, -1), 2),
                ("RIGHTPADDING", (0, 0), (-1, -1), 2),
                ("TOPPADDING", (0, 0), (-1, -1), 1),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 1),
            ]
        )
    )
    return table


def _table(table: Table, width: float, st: dict[str, Any]) -> list[Any]:
    from reportlab.platypus import Paragraph

    flow: list[Any] = [Paragraph(escape(table.title), st["h2"])]
    if table.intro:
        flow.append(Paragraph(escape(table.intro), st["note"]))
    widths = [width * w / sum(table.widths) for w in table.widths]
    head = [Paragraph(escape(c), st["head"]) for c in table.columns]
    for start in range(0, len(table.rows), _CHUNK):
        rows = [
            [Paragraph(escape(cell), st["na" if cell == NOT_RECORDED else "cell"]) for cell in row]
            for row in table.rows[start : start + _CHUNK]
        ]
        flow.append(_grid([head, *rows], widths))
    if table.note:
        flow.append(Paragraph(escape(table.note), st["note"]))
    return flow


def _story(view: ReportView, width: float, st: dict[str, Any]) -> list[Any]:
    from reportlab.platypus import Image, Paragraph, Spacer

    story: list[Any] = [
        Paragraph(escape(view.title), st["title"]),
        Paragraph(
            "Produced from the privacy ledger of secure-fed. Values are shown as the ledger "
            f"records them; where it records nothing, the report says \u201c{NOT_RECORDED}\u201d.",
            st["note"],
        ),
        Paragraph("Summary and chain verification", st["h2"]),
    ]
    facts = [
        [Paragraph(escape(k), st["head"]), Paragraph(escape(v), st["cell"])] for k, v in view.facts
    ]
    story.append(
        _grid(
            [[Paragraph("item", st["head"]), Paragraph("value", st["head"])], *facts],
            [width * 0.34, width * 0.66],
        )
    )
    story.append(Paragraph("Epsilon over rounds", st["h2"]))
    if view.chart_png:
        story.append(Image(io.BytesIO(view.chart_png), width=width, height=width * 3.0 / 6.4))
        story.append(
            Paragraph(
                "Cumulative epsilon after each committed round, recomputed over "
                "the whole history; dashed lines mark each budget.",
                st["note"],
            )
        )
    else:
        story.append(Paragraph("No committed privacy event is recorded in this scope.", st["note"]))
    for table in view.tables:
        story.extend(_table(table, width, st))
    story.append(Paragraph("How to verify this report", st["h2"]))
    story.append(
        Paragraph(
            "This document is for reading. The signed JSON bundle of the same "
            "scope is the evidence, checked offline without the database:",
            st["note"],
        )
    )
    story.extend(Paragraph(escape(c), st["code"]) for c in view.verify_commands)
    story.append(Spacer(1, 4))
    return story


def write_pdf(ctx: ReportContext) -> None:
    """Render the report in ``ctx`` to ``ctx.out`` as an A4 PDF."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.units import mm
    from reportlab.platypus import SimpleDocTemplate

    from compliance.view_tables import build_view

    _fonts()
    view, st = build_view(ctx), _styles()
    margin = 15 * mm
    partial = ctx.out.with_name(ctx.out.name + ".partial")

    def footer(canvas: Any, doc: Any) -> None:
        canvas.saveState()
        canvas.setFont(_FONT, 7)
        canvas.drawString(margin, 8 * mm, f"{view.title} - page {doc.page}")
        canvas.restoreState()

    doc = SimpleDocTemplate(
        str(partial),
        pagesize=A4,
        leftMargin=margin,
        rightMargin=margin,
        topMargin=margin,
        bottomMargin=margin,
        title=view.title,
        author=ctx.meta["produced"]["by"],
        subject="secure-fed audit report",
        creator=ctx.meta["produced"]["tool"],
    )
    try:
        doc.build(_story(view, A4[0] - 2 * margin, st), onFirstPage=footer, onLaterPages=footer)
        os.replace(partial, ctx.out)
    finally:
        partial.unlink(missing_ok=True)
