"""What a worker does as it starts: the metrics server, a word on the pool, database
connections of each pool process's own, and a watch on its database that says in the
log when it cannot be used. (Beat's folder is made by its scheduler:
``airlock.workers.tasks.broker.Schedule``.)"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery.signals import celeryd_after_setup, worker_init, worker_process_init, worker_ready

from airlock.workers.service.database_watch import watch_database
from airlock.workers.service.settings import settings
from airlock.workers.tasks import metrics
from airlock.workers.tasks.broker import NOTIFY_QUEUE, QUEUE, app
from airlock.workers.tasks.wiring import service

log = logging.getLogger("airlock")


@worker_init.connect
def _serve_metrics(**_: object) -> None:
    config = settings()
    if config.worker_metrics_port:
        metrics.serve(config.worker_metrics_port, config.home / "metrics")
        log.info(
            "serving metrics",
            extra={"action": "metrics.serving", "port": config.worker_metrics_port},
        )


THREADS_POOL = "celery.concurrency.thread"
SOLO_POOL = "celery.concurrency.solo"
PREFORK_POOL = "celery.concurrency.prefork"


def pool_warning(pool_cls: object, queues: Iterable[str] = (QUEUE,)) -> str | None:
    """What an operator should know of the worker's pool before it takes tasks: the
    threads pool waits about a second between tasks under load (Celery's deferred
    acknowledgement with ``acks_late`` and prefetch 1 outside prefork, celery#6941;
    measured: see BENCHMARKS.md). A consumer of
    deliveries alone is not warned: each of its tasks delivers all that is due."""
    if getattr(pool_cls, "__module__", None) != THREADS_POOL or set(queues) == {NOTIFY_QUEUE}:
        return None
    return (
        "the threads pool (-P threads) waits about a second between tasks under load "
        "(Celery's deferred acknowledgement with acks_late, celery#6941): run airlock "
        "worker without -P, or -P prefork"
    )


@worker_init.connect
def _as_the_pool_needs(sender: Any = None, **_: object) -> None:
    pool_cls = getattr(sender, "pool_cls", None)
    warning = pool_warning(pool_cls, app.amqp.queues.consume_from or (QUEUE,))
    if warning is not None:
        log.warning(warning, extra={"action": "worker.pool"})


@celeryd_after_setup.connect
def _service_of_this_process(instance: Any = None, **_: object) -> None:
    """A pool that runs its tasks in this process (green, threads, solo) has its service
    built as the worker starts, once the log is set up (``worker_init`` comes before):
    the log names the policy files it judges by. A prefork child builds its own."""
    pool = getattr(getattr(instance, "pool_cls", None), "__module__", None)
    if pool == SOLO_POOL:
        # a solo worker runs its tasks in this thread, as a pool child runs them in its own
        service().hold_connections()
    elif pool != PREFORK_POOL:
        service()


@worker_process_init.connect
def _fresh_connections(**_: object) -> None:
    # a forked child must not share the parent's database connections; its tasks run
    # in this thread, which keeps its own between them
    service.cache_clear()
    service().hold_connections()


@worker_ready.connect
def _watch_database(**_: object) -> None:
    # in the main process, once it consumes: a worker whose database is away still
    # answers remote control, and says in its log why its segments wait
    watch_database(settings().database_url)
