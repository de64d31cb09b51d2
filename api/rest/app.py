"""The application factory of the REST service: ``create_app(settings)``.

Builds the FastAPI application over the ledger named by the settings: the
versioned ``/v1`` routers (one module per resource in :mod:`api.rest.v1`),
health and metrics, the console's log-in, and the officer's console
(``api.rest.console``) when that package is present. Errors are rendered as
RFC 9457 problems (:mod:`api.rest.problems`); denials are audited
(:mod:`api.rest.denials`). The interactive docs pages are off (they load
scripts from a CDN); ``/openapi.json`` is served.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from fastapi import APIRouter, FastAPI

from api.rest.context import AppContext, build_context
from api.rest.denials import install_denial_handler
from api.rest.health import router as health_router
from api.rest.metrics import ApiMetrics
from api.rest.middleware import ServiceMiddleware
from api.rest.problems import install_problem_handlers
from api.rest.session import router as session_router
from api.rest.settings import ApiSettings
from api.rest.v1 import ROUTERS

__all__ = ["create_app", "API_VERSION"]

logger = logging.getLogger(__name__)

API_VERSION = "1.0.0"


def _console() -> object | None:
    try:
        return importlib.import_module("api.rest.console")
    except ModuleNotFoundError as exc:
        if exc.name in ("api.rest.console",):
            return None
        raise


def _install_console(app: FastAPI) -> None:
    module = _console()
    if module is None:
        return
    install = getattr(module, "install", None)
    if callable(install):
        install(app)
        return
    router = getattr(module, "router", None)
    if isinstance(router, APIRouter):
        app.include_router(router)


def create_app(settings: ApiSettings, *, context: AppContext | None = None) -> FastAPI:
    """Return the service's FastAPI application.

    Parameters
    ----------
    settings
        The typed settings (:meth:`ApiSettings.load`).
    context
        An already built context (tests share one; its settings are replaced
        by ``settings``); default: built from ``settings``, closed at shutdown.

    Raises
    ------
    ServiceMisconfigured
        When a configured key cannot be loaded.
    """
    owned = context is None
    ctx = build_context(settings) if context is None else replace(context, settings=settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if owned:
            ctx.close()

    app = FastAPI(
        title="secure-fed",
        version=API_VERSION,
        summary="Privacy budgets, the audit log, compliance reports and rounds over HTTP.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.metrics = ApiMetrics(ctx)
    install_problem_handlers(app)
    install_denial_handler(app)
    app.include_router(health_router)
    app.include_router(session_router)
    for router in ROUTERS:
        app.include_router(router, prefix="/v1")
    _install_console(app)
    hsts = settings.api_tls_certfile is not None
    app.add_middleware(
        ServiceMiddleware,
        max_body=settings.api_max_body_bytes,
        metrics=app.state.metrics,
        hsts=hsts,
    )
    return app
