"""ASGI middleware: request size limit, security headers and request metrics.

Pure ASGI (no per-request task switch): the body limit counts streamed bytes
as well as ``Content-Length`` and answers 413 problem+json before the route
reads more; every response gets the headers of the OWASP Secure Headers
Project (no CORS header is ever sent: cross-origin browsers are refused by
their same-origin policy); latency and status are recorded per route template.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from api.rest.errors import BodyTooLarge
from api.rest.metrics import ApiMetrics
from api.rest.problems import PROBLEM_JSON

__all__ = ["ServiceMiddleware", "SECURITY_HEADERS"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Headers added to every response.
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self' data:; "
        b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"cache-control", b"no-store"),
)
_HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")


class ServiceMiddleware:
    """Wrap the application with the size limit, security headers and metrics.

    Parameters
    ----------
    app
        The ASGI application.
    max_body
        Largest accepted request body in bytes.
    metrics
        Where to record requests (``None``: not recorded).
    hsts
        Add ``Strict-Transport-Security`` (when served over TLS).
    """

    def __init__(
        self, app: ASGIApp, *, max_body: int, metrics: ApiMetrics | None, hsts: bool
    ) -> None:
        self.app = app
        self.max_body = max_body
        self.metrics = metrics
        self.headers = SECURITY_HEADERS + ((_HSTS,) if hsts else ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            status[0] = 413
            await self._too_large(scope, send)
            self._record(scope, status[0], time.perf_counter() - started)
            return
        try:
            await self._serve(scope, receive, send, status)
        finally:
            self._record(scope, status[0], time.perf_counter() - started)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, status: list[int]) -> None:
        seen = [0]

        async def limited_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen[0] += len(message.get("body", b""))
                if seen[0] > self.max_body:  # rendered as 413 problem+json by the app
                    raise HTTPException(413, f"request body larger than {self.max_body} bytes")
            return message

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                message["headers"] = [*message.get("headers", []), *self.headers]
            await send(message)

        await self.app(scope, limited_receive, send_with_headers)

    async def _too_large(self, scope: Scope, send: Send) -> None:
        body = json.dumps(
            {
                "type": "urn:secure-fed:error:" + BodyTooLarge.code,
                "title": BodyTooLarge.code,
                "status": 413,
                "detail": f"request body larger than {self.max_body} bytes",
                "instance": str(scope.get("path", ""))[:512],
                "code": BodyTooLarge.code,
            }
        ).encode("utf-8")
        headers = [
            (b"content-type", PROBLEM_JSON.encode("ascii")),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
            *self.headers,
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        if self.metrics is None:
            return
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        if template != "unmatched" and str(scope.get("path", "")).startswith("/v1/"):
            template = "/v1" + template  # routes keep their path without the include prefix
        method = str(scope.get("method", ""))[:8]
        self.metrics.requests.labels(route=template, method=method, status=str(status)).inc()
        self.metrics.latency.labels(route=template, method=method).observe(seconds)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
