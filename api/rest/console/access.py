"""Who may see a console page: officers and administrators, by session cookie or bearer token.

:func:`officer` wraps :func:`api.rest.auth.browser_principal` for pages: a
request without valid credentials is redirected to the log-in form (303 to
``/console/login``) and a caller whose role lacks ``reports:read`` (a
participant or service token) gets an HTML 403 page. Both refusals are
written to the audit log as ``access.denied`` before the answer, exactly as
the JSON API's denials are (:func:`api.rest.denials.record_denial`), so
sending a browser elsewhere hides nothing from the log.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from api.rest.auth import Principal, browser_principal
from api.rest.denials import record_denial
from api.rest.errors import Forbidden, Unauthenticated

__all__ = ["LOGIN_PATH", "Officer", "install_access_handlers", "officer"]

#: The log-in form; unauthenticated page requests are sent there.
LOGIN_PATH = "/console/login"


class LoginRequired(Exception):
    """A page request without valid credentials (already audited): redirect to the form."""


class PageForbidden(Exception):
    """A page request by a role that may not read the console (already audited)."""

    def __init__(self, role: str) -> None:
        super().__init__(role)
        self.role = role


def officer(request: Request) -> Principal:
    """FastAPI dependency of every console page: the officer or administrator calling.

    Raises
    ------
    LoginRequired
        No credentials, or a cookie or token that is forged, expired or revoked.
    PageForbidden
        A token whose role (participant, service) or scopes lack ``reports:read``.
    """
    try:
        return browser_principal(request).require("reports:read")
    except Unauthenticated as exc:
        record_denial(request, exc, 401)
        raise LoginRequired from None
    except Forbidden as exc:
        record_denial(request, exc, 403)
        principal = getattr(request.state, "principal", None)
        role = principal.role if isinstance(principal, Principal) else "none"
        raise PageForbidden(role) from None


#: Annotated dependency of the console pages.
Officer = Annotated[Principal, Depends(officer)]


async def _to_login(_request: Request, _exc: Exception) -> Response:
    return RedirectResponse(LOGIN_PATH, status_code=303)


async def _forbidden(request: Request, exc: Exception) -> Response:
    from api.rest.console.render import page

    role = exc.role if isinstance(exc, PageForbidden) else "none"
    return await run_in_threadpool(
        page, request, "denied.html", status_code=403, title="Not allowed", role=role
    )


def install_access_handlers(app: FastAPI) -> None:
    """Turn the console's refusals into a redirect (401) or an HTML page (403)."""
    app.add_exception_handler(LoginRequired, _to_login)
    app.add_exception_handler(PageForbidden, _forbidden)
