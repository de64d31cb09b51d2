"""Entry point of uvicorn worker processes: the application built from the environment.

``secure-fed api`` validates the settings once, then starts uvicorn with
``api.rest.serve:app_from_env`` as a factory; every worker builds its own
application from the same environment (``SECURE_FED_*``, plus
``SECURE_FED_API_CONFIG`` naming the TOML file), so the workers share nothing
but the database.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI

from api.rest.app import create_app
from api.rest.settings import ApiSettings

__all__ = ["CONFIG_ENV", "app_from_env"]

#: Environment variable naming the TOML settings file of the workers.
CONFIG_ENV = "SECURE_FED_API_CONFIG"


def app_from_env() -> FastAPI:
    """Build the application from ``SECURE_FED_*`` and the TOML file ``SECURE_FED_API_CONFIG``."""
    config = os.environ.get(CONFIG_ENV)
    return create_app(ApiSettings.load(Path(config) if config else None))
