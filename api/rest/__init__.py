"""The REST service of secure-fed: budgets, audit log, reports and rounds over HTTP.

``create_app(settings)`` (:mod:`api.rest.app`) builds the FastAPI application;
``secure-fed api`` serves it under uvicorn. See ``docs/api.md``.
"""

from api.rest.app import create_app
from api.rest.settings import ApiSettings

__all__ = ["ApiSettings", "create_app"]
