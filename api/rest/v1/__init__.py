"""Version 1 of the REST API: one router module per resource, mounted under ``/v1``."""

from fastapi import APIRouter

from api.rest.v1 import audit, budget_audits, budgets, charges, participants, reports, rounds

__all__ = ["ROUTERS"]

#: Routers mounted under ``/v1`` by :func:`api.rest.create_app`.
ROUTERS: tuple[APIRouter, ...] = (
    budgets.router,
    charges.router,
    budget_audits.router,
    participants.router,
    audit.router,
    reports.router,
    rounds.router,
)
