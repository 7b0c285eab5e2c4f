"""The composition root: the process's one Service, built from the settings, with the
Celery app (``airlock.workers.tasks.broker``) as its publisher and this process's notification
dispatcher (if it runs one) woken by its transitions. The doors get what they need from
here."""

from __future__ import annotations

from functools import lru_cache

from airlock.workers.service import Service
from airlock.workers.service.assembly import build_service, limits_of, pool_of, registry_of
from airlock.workers.service.settings import Settings, settings
from airlock.workers.tasks import broker, dispatcher, metrics

__all__ = [
    "build_service",
    "check_broker",
    "dispatching_service",
    "limits_of",
    "pool_of",
    "registry_of",
    "service",
]


DISPATCH_POOL = 4
"""Connections of each of a worker's notification dispatcher's own pools (at most
``AIRLOCK_DB_POOL_SIZE``): its claims and settlements use one, its reads another."""


def dispatching_service(config: Settings) -> Service:
    """The service a worker's notification dispatcher claims, reads and settles the
    outbox through: on pools of its own (``DISPATCH_POOL`` connections each), so that its
    deliveries never wait for a connection behind the segments, nor the segments
    behind them."""
    own = config.model_copy(update={"db_pool_size": min(DISPATCH_POOL, config.db_pool_size)})
    return build_service(own, broker.enqueue_segment, dispatcher.wake_up)


@lru_cache(maxsize=1)
def service() -> Service:
    """The process's service, publishing wake-ups through the Celery app; with
    notifications on, a transition wakes this process's dispatcher, if it runs one."""
    config = settings()
    notify = dispatcher.wake_up if config.notify_url else None
    built = build_service(config, broker.enqueue_segment, notify)
    built.watchers.add(metrics.observe_decision)  # a worker's (the API has its own)
    return built


def check_broker() -> None:
    """Raises unless the broker answers (for ``/readyz``)."""
    with broker.app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
