"""Rendering console pages: one Jinja2 environment (autoescaped), navigation and filters.

Templates live in ``api/rest/console/templates`` and the stylesheet in
``static``; the service's Content-Security-Policy forbids inline styles and
scripts, so pages carry classes only and no script at all (they work
without JavaScript). Times are shown in UTC to the second, the way the
compliance report shows them (:func:`compliance.view.when`).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from api.rest.auth import Principal
from compliance.scope import timestamp
from compliance.view import round_label, when

__all__ = ["NAVIGATION", "TEMPLATES", "STATIC", "environment", "page", "utc", "number", "rounded"]

#: Folder of the Jinja2 templates.
TEMPLATES = Path(__file__).with_name("templates")
#: Folder of the stylesheet served under ``/console/static``.
STATIC = Path(__file__).with_name("static")

#: Main navigation: (path, label).
NAVIGATION: tuple[tuple[str, str], ...] = (
    ("/console/", "Overview"),
    ("/console/budgets", "Budgets"),
    ("/console/rounds", "Rounds"),
    ("/console/outliers", "Outlier decisions"),
    ("/console/decryptions", "Decryption log"),
    ("/console/chain", "Chain status"),
)


def utc(seconds: float | None) -> str:
    """Show epoch seconds as ``2026-11-30 12:25:16Z`` (a dash for ``None``)."""
    return "-" if seconds is None else when(timestamp(seconds))


#: Significant digits of a number shown to people (the exact value stays in the markup).
DIGITS = 4


def rounded(value: object, digits: int = DIGITS) -> str:
    """Round a recorded number to ``digits`` significant digits for reading.

    ``9.693695476445894`` reads ``9.694``, ``0.023247042418603644`` reads
    ``0.02325``; integers, values already that short and text (``keep``) are
    shown as they are, ``None`` as a dash. Numbers of 10,000 or more are shown
    to the unit.
    """
    if value is None:
        return "-"
    raw = str(value)
    if isinstance(value, bool | int):
        return raw
    try:
        exact = Decimal(raw)
    except (InvalidOperation, ValueError):
        return raw
    if not exact.is_finite() or len(exact.as_tuple().digits) <= digits:
        return raw
    if abs(exact) >= 10**digits:
        return f"{exact:.0f}"
    adjusted = exact.adjusted()  # exponent of the leading digit
    return f"{exact:.{max(digits - 1 - adjusted, 0)}f}"


def number(value: object) -> Markup:
    """Show a recorded number rounded (:func:`rounded`), the exact value in ``<data value>``.

    Pages are for people; the exact stored value is in the element's ``value``
    attribute and in the JSON the API returns.
    """
    if value is None:
        return Markup("-")
    shown = rounded(value)
    if shown == str(value):
        return Markup(escape(shown))
    return Markup('<data value="{}">{}</data>').format(str(value), shown)


@lru_cache(maxsize=1)
def environment() -> Environment:
    """Return the console's Jinja2 environment (autoescaping HTML, strict undefined)."""
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html", "svg"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["utc"] = utc
    env.filters["number"] = number
    env.filters["round_label"] = round_label
    env.filters["when"] = when
    env.globals["navigation"] = NAVIGATION
    return env


def page(
    request: Request,
    template: str,
    *,
    title: str,
    principal: Principal | None = None,
    status_code: int = 200,
    **values: Any,
) -> HTMLResponse:
    """Render ``template`` as a full page.

    Parameters
    ----------
    request
        The request (its path marks the current navigation entry).
    template
        Template file name in :data:`TEMPLATES`.
    title
        The page's ``<title>`` and first heading.
    principal
        The officer viewing the page (``None`` on the log-in and refusal pages).
    status_code
        HTTP status of the answer.
    values
        Template variables.
    """
    html = (
        environment()
        .get_template(template)
        .render(
            title=title,
            principal=principal,
            current=request.url.path,
            **values,
        )
    )
    return HTMLResponse(html, status_code=status_code)
