"""The API's Prometheus metrics: its own counters, and the store's figures read at
scrape time (at most every few seconds)."""

from __future__ import annotations

import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from airlock.workers.service import Service


class Metrics:
    def __init__(self, service: Service) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "airlock_decisions_total", "Decisions received, by outcome", ["result"],
            registry=self.registry,
        )  # fmt: skip
        self.rejections = Counter(
            "airlock_webhook_rejections_total", "Approval webhooks refused, by reason", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_StoreCollector(service))


class _StoreCollector(Collector):
    """Read from the database, the source of truth, at most once per ``every`` seconds:
    the figures are a few statements (runs by status from the tallies the database
    keeps, the rest through indexes), and however often Prometheus (or
    anyone: the endpoint is open) scrapes, the database is read no more often."""

    def __init__(self, service: Service, every: float = 5.0) -> None:
        self._service = service
        self._every = every
        self._lock = threading.Lock()
        self._read: tuple[float, list[Any]] | None = None

    def collect(self) -> Any:
        with self._lock:
            if self._read is None or time.monotonic() - self._read[0] >= self._every:
                self._read = (time.monotonic(), self._families())
            return list(self._read[1])

    def _families(self) -> list[Any]:
        figures = self._service.stats(finished_within=())
        by_status = GaugeMetricFamily("airlock_runs", "Runs by status", labels=["status"])
        for status, count in figures.runs.items():
            by_status.add_metric([status.value], count)
        lag = GaugeMetricFamily(
            "airlock_notification_lag_seconds",
            "Time from a run's transition to its notification's 2xx, over the last"
            " notifications delivered, by quantile",
            labels=["quantile"],
        )
        if figures.notification_lag is not None:
            lag.add_metric(["0.5"], figures.notification_lag[0])
            lag.add_metric(["0.99"], figures.notification_lag[1])
        return [
            by_status,
            lag,
            GaugeMetricFamily(
                "airlock_oldest_waiting_approval_seconds",
                "Age of the oldest waiting run",
                value=figures.oldest_waiting_seconds or 0.0,
            ),
            GaugeMetricFamily(
                "airlock_notifications_due",
                "Notifications in the outbox waiting for a delivery attempt",
                value=figures.notifications_due,
            ),
            GaugeMetricFamily(
                "airlock_notifications_given_up",
                "Notifications whose every delivery attempt failed (kept in the outbox)",
                value=figures.notifications_given_up,
            ),
        ]
