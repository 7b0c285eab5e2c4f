"""Wiring: one Service per process, built from the settings."""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from persistence.crypto import StateCipher
from persistence.db import make_engine
from persistence.repository import RunRepository
from workers.registry import Registry
from workers.service import Enqueue, Limits, Notify, Service
from workers.settings import Settings, settings


def limits_of(config: Settings) -> Limits:
    return Limits(
        lease=timedelta(seconds=config.lease_seconds),
        queued_stale_after=timedelta(seconds=config.queued_stale_after),
        max_attempts=config.max_attempts,
        retry_base_delay=config.retry_base_delay,
        retry_max_delay=config.retry_max_delay,
    )


def build_service(config: Settings, enqueue: Enqueue, notify: Notify | None = None) -> Service:
    repo = RunRepository(make_engine(config.database_url), cipher=StateCipher(config.state_key))
    return Service(
        repo=repo,
        registry=Registry.from_paths(config.agents),
        enqueue=enqueue,
        notify=notify,
        limits=limits_of(config),
    )


@lru_cache(maxsize=1)
def service() -> Service:
    """The process's service, publishing wake-ups through the Celery app."""
    from workers.celery_app import enqueue_segment, notify_run  # noqa: PLC0415 - cycle

    config = settings()
    return build_service(config, enqueue_segment, notify_run if config.notify_url else None)
