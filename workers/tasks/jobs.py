"""The Celery tasks: thin shells over the service (the door of every segment and beat
job). Their names are versioned constants of ``airlock.workers.tasks.broker``."""

from __future__ import annotations

import logging
import os
import secrets
import time
from datetime import timedelta
from typing import Any

from celery import Task

from airlock.workers.service import EventType, SegmentInterruptedError
from airlock.workers.service.backoff import backoff
from airlock.workers.service.database_watch import cannot_use
from airlock.workers.service.settings import settings
from airlock.workers.tasks import metrics
from airlock.workers.tasks.broker import DELIVER, EXPIRE, NOTIFY, PURGE, RUN_SEGMENT, SWEEP, app
from airlock.workers.tasks.wiring import service

log = logging.getLogger("airlock")


@app.task(bind=True, name=RUN_SEGMENT, max_retries=None)
def run_segment(
    self: Task[Any, Any], run_id: str, take_over: str | None = None, adopt: bool = False
) -> str:
    # unique to this execution: a ledger record started under it is this execution's own
    # (a container restarted with the same hostname and pids redelivers the same task id)
    nonce = secrets.token_hex(4)
    request = self.request
    owner = f"{request.hostname}:{os.getpid()}:{request.id}:{request.retries}:{nonce}"
    started = time.perf_counter()
    try:
        result = service().run_segment(run_id, owner, take_over=take_over, adopt=adopt)
    except SegmentInterruptedError as stopped:
        # Nothing could be recorded. Try again later, continuing what it says.
        countdown = backoff(self.request.retries, cap=60)
        log.warning(
            "%s: the segment of run %s is tried again in %.1f s",
            cannot_use(settings().database_url, stopped.__cause__ or stopped),
            run_id,
            countdown,
            extra={
                "action": "segment.db_retry",
                "run_id": run_id,
                "retries": self.request.retries,
                "retry_in": round(countdown, 1),
            },
        )
        kwargs = {"run_id": run_id, "take_over": stopped.take_over, "adopt": stopped.adopt}
        raise self.retry(exc=stopped, countdown=countdown, kwargs=kwargs) from stopped
    outcome = result.outcome.value
    metrics.observe_segment(outcome, time.perf_counter() - started)
    return outcome  # Celery logs it at INFO: "Task …[id] succeeded in …s: 'completed'"


@app.task(name=DELIVER)
def deliver_notifications() -> int:
    """A wake-up an earlier version queued for its deliverers: the dispatcher of each
    worker delivers the outbox now (``airlock.workers.tasks.dispatcher``), so it does nothing."""
    return 0


@app.task(name=NOTIFY)
def notify(event_type: EventType, run_id: str, event: object = None) -> int:
    """A notification an earlier version queued as a task of its own: into the outbox
    with it, delivered by a dispatcher as every other."""
    del event
    if settings().notify_url:
        service().add_notification(run_id, event_type)
    return 0


@app.task(name=SWEEP)
def sweep() -> dict[str, int]:
    report = service().sweep()
    return {
        "stale": len(report.requeued_stale),
        "requeued": len(report.reclaimed.requeued),
        "failed": len(report.reclaimed.failed),
    }


@app.task(name=EXPIRE)
def expire_approvals() -> int:
    return len(service().expire_approvals())


@app.task(name=PURGE)
def purge() -> int:
    return service().purge(timedelta(days=settings().retention_days))
