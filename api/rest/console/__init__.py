"""The compliance officer's console: server-rendered, read-only pages over the ledger.

:func:`install` adds the pages (``/console/...``, Jinja2 templates, no
JavaScript) and the stylesheet (``/console/static``) to the service built by
:func:`api.rest.create_app`. Pages are for roles holding ``reports:read``
(officers, administrators), authenticated by the session cookie of
``POST /console/login`` or a bearer token; a request without credentials is
redirected to the log-in form and a participant or service token gets a 403
page, both audited (:mod:`api.rest.console.access`). Accessibility follows
WCAG 2.2 level AA (skip link, landmarks, labelled controls, captioned tables
with header scopes, visible focus, contrast of at least 4.5:1). See the
"Console" section of ``docs/api.md``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.rest.console import pages_budgets, pages_chain, pages_home, pages_rounds
from api.rest.console.access import install_access_handlers
from api.rest.console.render import STATIC

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """Mount the console's pages and stylesheet on ``app``."""
    install_access_handlers(app)
    for module in (pages_home, pages_budgets, pages_rounds, pages_chain):
        app.include_router(module.router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
