"""What a worker runs beside its pool, added through Celery's bootsteps (its documented
way to extend a worker: ``app.steps``, see ``airlock.workers.tasks``):

- ``Dispatch``: the notification dispatcher of this process (``airlock.workers.tasks.dispatcher``),
  with ``AIRLOCK_NOTIFY_URL`` set and ``AIRLOCK_NOTIFY_CONCURRENCY`` above 0;
- ``Intake``: on a green pool (gevent, eventlet), one message more than the pool has
  slots. Without it, a worker whose every slot is busy stops reading the broker (kombu's
  Redis channel has no credit left) and looks again only at the end of its consumer's
  wait, up to 2 s later (Celery's green consumer loop, ``synloop``, has no event loop to
  wake it when a task is acknowledged): a backlog was taken about one task per 2 s with
  ``-c 2``, about 100 a second with ``-c 200``. With one more message of credit the
  consumer always has one in hand, which the green pool's ``spawn`` holds until a slot
  frees: the next task starts as the last one ends. The prefork pool's consumer runs on
  an event loop, woken by each acknowledgement: it keeps ``worker_prefetch_multiplier``
  as it is.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import bootsteps
from celery.worker.components import Pool
from celery.worker.consumer.tasks import Tasks

from airlock.workers.service import Retries
from airlock.workers.service.settings import settings
from airlock.workers.service.views import run_view
from airlock.workers.tasks import dispatcher, metrics, notify
from airlock.workers.tasks.wiring import dispatching_service

log = logging.getLogger("airlock")

LEASE_MARGIN = 10.0
"""Seconds a dispatcher holds a claimed notification beyond its attempt's deadline."""


class Dispatch(bootsteps.StartStopStep):
    """Runs this process's notification dispatcher while the worker runs."""

    requires = (Pool,)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.running: dispatcher.Dispatcher | None = None

    def start(self, parent: Any) -> None:
        config = settings()
        url = config.notify_url
        if not url or config.notify_concurrency == 0:
            return
        running = dispatching_service(config)

        def send(body: str, webhook_id: str) -> int:
            delivery = notify.deliver(
                url,
                config.notify_secret,
                body,
                webhook_id=webhook_id,
                timeout=config.notify_timeout,
            )
            return delivery.status_code

        self.running = dispatcher.Dispatcher(
            running,
            send,
            lambda run: run_view(running, run),
            concurrency=config.notify_concurrency,
            retries=Retries(config.notify_retry_max_delay, config.notify_max_attempts),
            # longer than an attempt, whose deadline ends it: a claim of a worker killed
            # mid-send is due again soon after
            lease=timedelta(seconds=config.notify_timeout + LEASE_MARGIN),
            observe=metrics.observe_lag,
        )
        self.running.start()
        dispatcher.attach(self.running)
        log.info(
            "delivering notifications",
            extra={"action": "notify.dispatching", "concurrency": config.notify_concurrency},
        )

    def stop(self, parent: Any) -> None:
        if self.running is not None:
            dispatcher.detach(self.running)
            self.running.stop()
            self.running = None

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)


class Intake(bootsteps.StartStopStep):
    """One message of credit more than the green pool's slots (see the module's
    docstring); applied each time the consumer (re)starts its task consumer."""

    requires = (Tasks,)

    def start(self, parent: Any) -> None:
        if getattr(parent.pool, "is_green", False) and parent.qos is not None:
            parent.qos.increment_eventually(1)
