"""Typed errors of the REST service, each with a stable code and its HTTP status.

Codes are documented in ``docs/audit/errors-api.md``; the table mapping every
package's codes to HTTP statuses is :mod:`api.rest.problems`.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "RestError",
    "AccessDenied",
    "Unauthenticated",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "BodyTooLarge",
    "RequestInvalid",
    "NotReady",
    "ServiceMisconfigured",
    "ReportCrossCheckMismatch",
    "InternalFault",
]


class RestError(Exception):
    """Base of every error raised by :mod:`api.rest`.

    Parameters
    ----------
    message
        Human-readable explanation (the problem's ``detail``).
    """

    code: ClassVar[str] = "API_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class AccessDenied(RestError):
    """A caller was refused (401 or 403); every instance is written to the audit log.

    Parameters
    ----------
    message
        What was refused, for the caller.
    reason
        The audited reason: a more specific code (``LEDGER_TOKEN_EXPIRED``...),
        default this error's own code.
    """

    code = "API_ACCESS_DENIED"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or self.code


class Unauthenticated(AccessDenied):
    """No credentials, or credentials that do not authenticate anyone (HTTP 401)."""

    code = "API_UNAUTHENTICATED"


class Forbidden(AccessDenied):
    """The caller's role, scopes or identity do not allow this request (HTTP 403)."""

    code = "API_FORBIDDEN"


class NotFound(RestError):
    """No such route or resource (HTTP 404)."""

    code = "API_NOT_FOUND"


class MethodNotAllowed(RestError):
    """The route exists but not with this HTTP method (HTTP 405)."""

    code = "API_METHOD_NOT_ALLOWED"


class BodyTooLarge(RestError):
    """The request body exceeds ``api_max_body_bytes`` (HTTP 413)."""

    code = "API_BODY_TOO_LARGE"


class RequestInvalid(RestError):
    """Path, query or body failed validation (HTTP 422); ``errors`` lists the fields."""

    code = "API_REQUEST_INVALID"


class NotReady(RestError):
    """The ledger database is unreachable or its schema is not current (HTTP 503)."""

    code = "API_NOT_READY"


class ServiceMisconfigured(RestError):
    """The service cannot start or serve: a key file or setting is missing or unreadable."""

    code = "API_SERVICE_MISCONFIGURED"


class ReportCrossCheckMismatch(RestError):
    """A report export's cross-check disagrees (HTTP 409): no report is returned.

    Raised when the ledger tables disagree with the audit log, or a party log
    (key authority, helper) is missing, does not verify, or records other
    decryptions than the ledger; ``rows`` lists every disagreeing row.
    """

    code = "API_REPORT_CROSS_CHECK_MISMATCH"

    def __init__(self, message: str, *, rows: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.rows = rows


class InternalFault(RestError):
    """An unexpected failure (HTTP 500); the log has the traceback, the caller only the code."""

    code = "API_INTERNAL"
