"""The API's Prometheus metrics: its own counters, what the decisions it records came
to (told by the service: ``airlock.workers.service.watching``), and the store's figures
read at scrape time (at most every few seconds)."""

from __future__ import annotations

import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from airlock.persistence.domain import RunStatus
from airlock.workers.service import Service
from airlock.workers.service.seen import DecisionSeen
from airlock.workers.tasks.metrics import WAIT_BUCKETS, record_decision


class Metrics:
    def __init__(self, service: Service) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "airlock_decisions_total",
            "Decision requests, by the door they came through and what they came to",
            ["door", "outcome"],
            registry=self.registry,
        )
        self.waits = Histogram(
            "airlock_approval_wait_seconds",
            "Time a run waited from suspension to the decision that ended the wait, by"
            " agent and outcome (approved, denied, mixed, expired)",
            ["agent", "outcome"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.expiries = Counter(
            "airlock_approval_expiries_total",
            "Waits ended by their approval's expiry, by agent",
            ["agent"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "airlock_webhook_rejections_total", "Approval webhooks refused, by reason", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_StoreCollector(service))
        service.watchers.add(self.seen)

    def seen(self, seen: DecisionSeen) -> None:
        """A decision request this process's service answered."""
        record_decision(seen, self.decisions, self.waits, self.expiries)


class CachedCollector(Collector):
    """Read from the database, the source of truth, at most once per ``every`` seconds:
    however often Prometheus (or anyone: the endpoint is open) scrapes, the database is
    read no more often. A subclass says what it reads (``_families``)."""

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
        raise NotImplementedError


class _StoreCollector(CachedCollector):
    """The store's figures: a few statements (runs by status from the tallies the
    database keeps, the rest through indexes)."""

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
            GaugeMetricFamily(
                "airlock_runs_waiting",
                "Runs waiting for a decision",
                value=figures.runs.get(RunStatus.WAITING_FOR_APPROVAL, 0),
            ),
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
