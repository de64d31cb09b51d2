"""Browser log-in for the officer's console: an API token exchanged for a session cookie.

``POST /console/login`` takes a form field ``token`` (an API token of a
role holding ``reports:read``: officer or admin) and sets the cookie
``sf_session`` = ``<token id>.<expiry>.<HMAC-SM3 hex>``: the MAC (key:
``api_session_secret``) covers the token id and the expiry, so the cookie is
opaque to the browser and unforgeable; it holds no secret of the token. The
cookie is ``HttpOnly``, ``SameSite=Strict``, ``Path=/`` and ``Secure`` outside
development (OWASP Session Management Cheat Sheet). Every use re-reads the
token, so revoking it ends its sessions at once. Cookies are accepted only
by GET console pages and the report export (:func:`api.rest.auth.browser_principal`).
``POST /console/logout`` clears the cookie.
"""

from __future__ import annotations

import hmac
import time
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import BaseModel

from api.rest.auth import Principal, context
from api.rest.errors import AccessDenied, Unauthenticated
from api.rest.problems import problem_responses
from privacy_ledger.api_tokens import ApiToken, TokenError, TokenUnknown, hmac_sm3

__all__ = ["COOKIE", "router", "make_cookie", "token_of_cookie", "LoggedOut"]

COOKIE = "sf_session"
_MAX_FORM = 4096

router = APIRouter(tags=["console session"])


def make_cookie(key: bytes, token_id: str, expires: int) -> str:
    """Return the signed cookie value for ``token_id`` valid until ``expires`` (epoch s)."""
    payload = f"{token_id}.{expires}"
    return f"{payload}.{hmac_sm3(key, payload.encode('ascii')).hex()}"


def token_of_cookie(request: Request) -> ApiToken:
    """Return the token behind the request's session cookie, still valid now.

    Raises
    ------
    Unauthenticated
        No cookie, a forged or expired one, or a token revoked or expired since.
    """
    value = request.cookies.get(COOKIE)
    if not value:
        raise Unauthenticated("no credentials: send a bearer token or log in at /console/login")
    parts = value.split(".")
    ctx = context(request)
    if len(parts) != 3 or not parts[1].isdigit() or len(parts[0]) > 32:
        raise Unauthenticated("session cookie: malformed", reason="API_SESSION_INVALID")
    expected = make_cookie(ctx.session_key, parts[0], int(parts[1]))
    if not hmac.compare_digest(expected.encode("ascii"), value.encode("ascii", "replace")):
        raise Unauthenticated("session cookie: bad signature", reason="API_SESSION_INVALID")
    if int(parts[1]) <= time.time():
        raise Unauthenticated("session cookie: expired, log in again", reason="API_SESSION_EXPIRED")
    try:
        token = ctx.tokens.get(parts[0])
    except TokenUnknown:  # the id was signed by us: the token was deleted since
        raise Unauthenticated("session cookie: token gone", reason="API_SESSION_INVALID") from None
    if token.revoked_at is not None:
        raise Unauthenticated("session cookie: token revoked", reason="LEDGER_TOKEN_REVOKED")
    if token.expires_at <= time.time():
        raise Unauthenticated("session cookie: token expired", reason="LEDGER_TOKEN_EXPIRED")
    return token


class LoggedOut(BaseModel):
    """Answer of ``POST /console/logout``."""

    logged_out: bool


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def _form_token(request: Request) -> str:
    body = await request.body()
    if len(body) > _MAX_FORM:
        raise Unauthenticated("login form too large", reason="API_LOGIN_INVALID")
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
    except ValueError:  # more fields than a log-in form has
        raise Unauthenticated("login form: too many fields", reason="API_LOGIN_INVALID") from None
    values = fields.get("token", [])
    if len(values) != 1 or not values[0].strip():
        raise Unauthenticated("login form: field 'token' is required", reason="API_LOGIN_INVALID")
    return values[0].strip()


@router.post(
    "/console/login",
    status_code=303,
    response_class=RedirectResponse,
    responses={
        303: {"description": "Logged in; the cookie is set."},
        **problem_responses(401, 403),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": {
                        "type": "object",
                        "required": ["token"],
                        "properties": {"token": {"type": "string"}},
                    }
                }
            },
        }
    },
)
async def login(request: Request) -> Response:
    """Exchange an API token (form field ``token``) for a session cookie; redirect to /console/.

    A browser (``Accept: text/html``) that fails is redirected back to
    ``/console/login?failed=1``; other clients get the problem. Either way the
    failure is audited.
    """
    from starlette.concurrency import run_in_threadpool

    from api.rest.denials import record_denial

    ctx = context(request)
    try:
        if not _same_origin(request):
            raise Unauthenticated("login from another origin", reason="API_LOGIN_ORIGIN")
        presented = await _form_token(request)
        try:
            token = await run_in_threadpool(ctx.tokens.authenticate, presented)
        except TokenError as exc:
            raise Unauthenticated(exc.message, reason=exc.code) from None
        principal = Principal.of(token)
        request.state.principal = principal
        principal.require("reports:read")
    except AccessDenied as exc:
        if "text/html" not in request.headers.get("accept", ""):
            raise
        await run_in_threadpool(record_denial, request, exc, 401)
        return RedirectResponse("/console/login?failed=1", status_code=303)
    now = int(time.time())
    expires = min(now + ctx.settings.api_session_seconds, int(token.expires_at))
    response = RedirectResponse("/console/", status_code=303)
    response.set_cookie(
        COOKIE,
        make_cookie(ctx.session_key, token.id, expires),
        max_age=max(0, expires - now),
        path="/",
        httponly=True,
        secure=ctx.settings.secure_cookies,
        samesite="strict",
    )
    return response


@router.post(
    "/console/logout",
    response_model=LoggedOut,
    responses={303: {"description": "A browser (Accept: text/html) goes to the log-in form."}},
)
def logout(request: Request) -> Response | LoggedOut:
    """Clear the session cookie (the token itself stays valid; revoke it to end it).

    A browser (``Accept: text/html``) is redirected to ``/console/login``;
    other clients get ``{"logged_out": true}``.
    """
    ctx = context(request)
    html = "text/html" in request.headers.get("accept", "")
    response: Response = (
        RedirectResponse("/console/login", status_code=303)
        if html
        else JSONResponse(LoggedOut(logged_out=True).model_dump())
    )
    response.delete_cookie(
        COOKIE, path="/", httponly=True, secure=ctx.settings.secure_cookies, samesite="strict"
    )
    return response
