"""Prometheus metrics of the service: requests by route and status, latency, denials, refusals.

Counters and the latency histogram live in a registry per application (so
tests may build several apps in one process). Budget refusals are read from
the ledger at scrape time (``budget.refused`` audit entries), so every worker
reports the same figure. With several uvicorn workers, set
``PROMETHEUS_MULTIPROC_DIR`` (``secure-fed api`` does): per-request metrics are
then aggregated across workers by prometheus-client's multiprocess mode.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from api.rest.context import AppContext
from privacy_ledger.audit.models import AuditEntryRow

__all__ = ["ApiMetrics", "CONTENT_TYPE"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class _LedgerCollector(Collector):
    """Gauges read from the ledger at scrape time."""

    def __init__(self, ctx: AppContext) -> None:
        self._ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._ctx.sessions() as session:
            refused = session.scalar(
                select(func.count()).where(AuditEntryRow.event == "budget.refused")
            )
        family = GaugeMetricFamily(
            "secure_fed_budget_refusals", "Budget requests refused by the ledger (all time)."
        )
        family.add_metric([], float(refused or 0))
        yield family


class ApiMetrics:
    """The service's metrics.

    Parameters
    ----------
    ctx
        The service context (the ledger for the refusal gauge).
    """

    def __init__(self, ctx: AppContext) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "secure_fed_api_requests",
            "HTTP requests by route template, method and status.",
            ("route", "method", "status"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "secure_fed_api_request_seconds",
            "Request latency in seconds by route template.",
            ("route", "method"),
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.denials = Counter(
            "secure_fed_api_denials",
            "Requests refused (401/403), by audited reason.",
            ("reason",),
            registry=self.registry,
        )
        self._ledger = _LedgerCollector(ctx)
        self.registry.register(self._ledger)

    def render(self) -> bytes:
        """Return the exposition text (all workers' figures in multiprocess mode)."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            merged = CollectorRegistry()
            MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
            merged.register(self._ledger)
            return generate_latest(merged)
        return generate_latest(self.registry)
