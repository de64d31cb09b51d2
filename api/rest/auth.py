"""Who is calling: bearer API tokens (and console session cookies), roles and per-object rules.

Every request except health, readiness and the OpenAPI document carries
``Authorization: Bearer sft_<id>.<secret>``; the token is looked up in the
ledger database and its secret checked in constant time
(:class:`privacy_ledger.api_tokens.ApiTokenStore`), so a revoked or rotated
token is refused on the next request of every worker. A browser may instead
present the console's session cookie (:mod:`api.rest.session`), accepted only
by GET console pages and the report export.

Roles (docs/api.md): a ``participant`` reads only its own budgets, scores and
audit entries, and charges (reserve, commit, abort) only its own budgets; an
``officer`` reads everything and changes nothing; an ``admin`` also sets
budgets, resolves reservations and registers participants; a ``service`` reads
budgets, rounds, the audit log's heads and proofs, and the metrics. A token's
scopes, when given, narrow its role's permissions further. Every refusal is an
:class:`~api.rest.errors.AccessDenied`, audited by :mod:`api.rest.denials`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from api.rest.context import AppContext
from api.rest.errors import Forbidden, Unauthenticated
from privacy_ledger.api_tokens import ApiToken, TokenError

__all__ = [
    "PERMISSIONS",
    "Principal",
    "ReadAudit",
    "ReadBudgets",
    "ReadMetrics",
    "ReadReports",
    "ReadRounds",
    "WriteBudgets",
    "WriteParticipants",
    "BrowserReports",
    "ChargeBudgets",
    "BrowserOfficer",
    "api_principal",
    "browser_principal",
    "context",
    "require",
    "require_browser",
]

_READ = frozenset({"budgets:read", "audit:read", "rounds:read"})
#: What each role may do; a token's scopes (if any) narrow it.
PERMISSIONS: Mapping[str, frozenset[str]] = {
    "participant": _READ | {"budgets:charge"},
    "officer": _READ | {"reports:read", "metrics:read"},
    "admin": _READ
    | {"reports:read", "metrics:read", "budgets:write", "budgets:charge", "participants:write"},
    "service": _READ | {"metrics:read"},
}


@dataclass(frozen=True, kw_only=True)
class Principal:
    """The authenticated caller.

    Attributes
    ----------
    token_id
        Public id of the token (never its secret).
    name
        Label given at creation (who holds it).
    role
        ``participant``, ``officer``, ``admin`` or ``service``.
    participant_id
        The participant a ``participant`` token speaks for (else ``None``).
    permissions
        Effective permissions: the role's, narrowed by the token's scopes.
    via_cookie
        Authenticated by the console's session cookie rather than a bearer token.
    """

    token_id: str
    name: str
    role: str
    participant_id: str | None
    permissions: frozenset[str]
    via_cookie: bool = False

    @classmethod
    def of(cls, token: ApiToken, *, via_cookie: bool = False) -> Principal:
        """Build the principal of an authenticated token."""
        allowed = PERMISSIONS.get(token.role, frozenset())
        if token.scopes:
            allowed = allowed & frozenset(token.scopes)
        return cls(
            token_id=token.id,
            name=token.name,
            role=token.role,
            participant_id=token.participant_id,
            permissions=allowed,
            via_cookie=via_cookie,
        )

    @property
    def sees_everyone(self) -> bool:
        """Whether the caller may read every participant's objects."""
        return self.role != "participant"

    def require(self, permission: str) -> Principal:
        """Return self if ``permission`` is granted, else raise :class:`Forbidden`."""
        if permission not in self.permissions:
            raise Forbidden(f"role {self.role!r} (token {self.token_id}) may not {permission}")
        return self

    def require_participant(self, participant_id: str) -> Principal:
        """Refuse a participant reading another participant's objects (:class:`Forbidden`)."""
        if not self.sees_everyone and participant_id != self.participant_id:
            raise Forbidden(
                f"participant {self.participant_id!r} may read only its own objects",
                reason="API_OTHER_PARTICIPANT",
            )
        return self


def context(request: Request) -> AppContext:
    """Return the service's shared :class:`~api.rest.context.AppContext`."""
    ctx: AppContext = request.app.state.ctx
    return ctx


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthenticated("Authorization: expected 'Bearer <token>'", reason="API_SCHEME")
    return value.strip()


def _authenticate(request: Request, presented: str, *, via_cookie: bool = False) -> Principal:
    try:
        token = context(request).tokens.authenticate(presented)
    except TokenError as exc:
        raise Unauthenticated(exc.message, reason=exc.code) from None
    principal = Principal.of(token, via_cookie=via_cookie)
    request.state.principal = principal
    return principal


def api_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller authenticated by its bearer token (cookies ignored).

    Raises
    ------
    Unauthenticated
        No ``Authorization`` header, or a token that is malformed, unknown,
        wrong, expired or revoked.
    """
    presented = _bearer(request)
    if presented is None:
        raise Unauthenticated("no credentials: send Authorization: Bearer <token>")
    return _authenticate(request, presented)


def browser_principal(request: Request) -> Principal:
    """FastAPI dependency for GET console pages and the report export: bearer or cookie.

    Raises
    ------
    Unauthenticated
        As :func:`api_principal`, or for a cookie that is forged, expired or
        whose token was revoked; also for a cookie presented on a non-GET request.
    """
    from api.rest.session import token_of_cookie

    presented = _bearer(request)
    if presented is not None:
        return _authenticate(request, presented)
    if request.method not in ("GET", "HEAD"):
        raise Unauthenticated("session cookies are accepted on GET only", reason="API_COOKIE")
    token = token_of_cookie(request)
    principal = Principal.of(token, via_cookie=True)
    request.state.principal = principal
    return principal


def require(permission: str) -> Callable[[Principal], Principal]:
    """Dependency factory: the bearer-authenticated caller, holding ``permission``."""

    def dependency(principal: Annotated[Principal, Depends(api_principal)]) -> Principal:
        return principal.require(permission)

    return dependency


def require_browser(permission: str) -> Callable[[Principal], Principal]:
    """Dependency factory: the caller by bearer token or session cookie, holding ``permission``."""

    def dependency(principal: Annotated[Principal, Depends(browser_principal)]) -> Principal:
        return principal.require(permission)

    return dependency


ReadBudgets = Annotated[Principal, Depends(require("budgets:read"))]
WriteBudgets = Annotated[Principal, Depends(require("budgets:write"))]
#: Reserve, commit and abort (a participant: its own budget only; administrators).
ChargeBudgets = Annotated[Principal, Depends(require("budgets:charge"))]
WriteParticipants = Annotated[Principal, Depends(require("participants:write"))]
ReadAudit = Annotated[Principal, Depends(require("audit:read"))]
ReadRounds = Annotated[Principal, Depends(require("rounds:read"))]
ReadReports = Annotated[Principal, Depends(require("reports:read"))]
ReadMetrics = Annotated[Principal, Depends(require("metrics:read"))]
#: Report export: bearer or console cookie.
BrowserReports = Annotated[Principal, Depends(require_browser("reports:read"))]
#: Console pages: bearer or cookie, officers and administrators (reports:read).
BrowserOfficer = BrowserReports
