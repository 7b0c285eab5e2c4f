"""The Celery app: ``celery -A workers worker`` / ``celery -A workers beat``.

The database, not the broker, is the source of truth: a message is only a
wake-up. Every task starts with a guarded claim, so a duplicate or redelivered
message is a no-op, and the beat sweeper re-sends what a broker dropped.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

from celery import Celery, Task
from celery.signals import beat_init, worker_init, worker_process_init
from kombu import Queue

from workers import embedded_broker, metrics, queues, redis_broker
from workers.backoff import backoff
from workers.notify import deliver_due
from workers.publisher import Publisher
from workers.service import EventType, Service, is_database_error
from workers.settings import Settings, settings

log = logging.getLogger("airlock")

RUN_SEGMENT = "airlock.run_segment.v1"
SWEEP = "airlock.sweep.v1"
EXPIRE = "airlock.expire_approvals.v1"
PURGE = "airlock.purge.v1"
NOTIFY = "airlock.notify.v1"
DELIVER = "airlock.deliver_notifications.v1"
QUEUE = queues.SEGMENTS
NOTIFY_QUEUE = queues.NOTIFICATIONS
"""Deliveries' own queue. A worker started without ``-Q`` consumes both (the app's
``task_queues``): under the gevent pool a delivery that waits on its receiver holds a
greenlet, not the process. ``-Q airlock.notifications`` runs a replica for it alone."""


def broker_options(config: Settings) -> dict[str, Any]:
    if config.embedded_broker:
        # the folders are made with a channel (workers.embedded_broker)
        folder = config.broker_folder.resolve()
        # A worker finds a message at its next poll (every 0.05 s). A message read by a
        # worker that is then killed is lost: the sweeper re-sends it.
        return {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"),
            "store_processed": False,
            "polling_interval": 0.05,
        }
    if config.visibility_timeout is None:
        # A wake-up is not worth two Redis transactions per task (kombu's index of
        # unacknowledged messages, for its redelivery after the visibility timeout):
        # the database knows what is unfinished. A task whose pool process dies is
        # still requeued at once by its worker (task_reject_on_worker_lost), and the
        # messages a worker holds go back to the queue when it stops; those of a
        # worker that is killed are re-sent by the sweeper (a stale queued run, an
        # expired lease), as they were before the redelivery's hour had passed.
        return {"ack_emulation": False}
    # Redis redelivers an unacked message after this long, running or not:
    # it must be longer than the longest segment.
    return {"visibility_timeout": config.visibility_timeout}


def make_app(config: Settings) -> Celery:
    celery = Celery("airlock", broker=config.broker_url)
    if config.embedded_broker:
        celery.conf.broker_transport = embedded_broker.TRANSPORT
    elif config.broker_url.startswith("redis://"):  # rediss:// keeps kombu's checks of TLS
        celery.conf.broker_transport = redis_broker.TRANSPORT
    celery.conf.update(
        broker_transport_options=broker_options(config),
        broker_connection_retry_on_startup=True,
        task_default_queue=QUEUE,
        task_queues=(Queue(QUEUE), Queue(NOTIFY_QUEUE)),
        task_routes={DELIVER: {"queue": NOTIFY_QUEUE}, NOTIFY: {"queue": NOTIFY_QUEUE}},
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # A broker's blip does not cancel the segments in flight (Celery's coming default
        # would, up to 200 of them under gevent, each then waiting a lease to be redone):
        # they go on and record their stops in the database; the messages the broker
        # gives back are wake-ups of runs they hold, which their claim turns into no-ops
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_soft_shutdown_timeout=config.soft_shutdown_timeout,
        worker_enable_soft_shutdown_on_idle=True,
        worker_hijack_root_logger=False,
        # Celery's consumer, whose remote control on a gevent worker outlives a broker
        # restart (workers.green_pidbox)
        worker_consumer="workers.green_pidbox:Consumer",
        beat_schedule_filename=str(config.beat_schedule),
        # the schedule is saved after every job sent, not every 3 minutes: its age says
        # whether the beat is alive (`airlock health beat`, when no sweep is recorded)
        beat_sync_every=1,
        beat_schedule={
            "sweep": {"task": SWEEP, "schedule": config.sweep_interval},
            "expire-approvals": {"task": EXPIRE, "schedule": config.sweep_interval},
            "purge": {"task": PURGE, "schedule": 3600.0},
            "deliver-notifications": {"task": DELIVER, "schedule": config.sweep_interval},
        },
    )
    return celery


app = make_app(settings())
_provided: list[tuple[Callable[[], Service], Callable[[], None]]] = []


def provide(service: Callable[[], Service], *, fresh: Callable[[], None]) -> None:
    """How the tasks get the process's service: ``workers.wiring`` provides it, and how
    to drop it (``fresh``: a forked pool child builds its own)."""
    _provided[:] = [(service, fresh)]


def service() -> Service:
    if not _provided:
        raise RuntimeError("no service provided: load the app as workers.app (workers.wiring)")
    return _provided[0][0]()


publish = Publisher(app, QUEUE)
publish_notice = Publisher(app, NOTIFY_QUEUE)


def enqueue_segment(run_id: str, delay: float | None = None) -> None:
    if delay:
        run_segment.apply_async((run_id,), countdown=delay)
    else:
        publish(RUN_SEGMENT, (run_id,))


def notify_run(event_type: EventType, run_id: str) -> None:
    """Wake a deliverer: the transition recorded the notification in the outbox."""
    log.debug(event_type, extra={"action": "notify", "run_id": run_id, "type": event_type})
    publish_notice(DELIVER, ())


@worker_init.connect
def _serve_metrics(**_: object) -> None:
    config = settings()
    if config.worker_metrics_port:
        metrics.serve(config.worker_metrics_port, config.home / "metrics")
        log.info(
            "serving metrics",
            extra={"action": "metrics.serving", "port": config.worker_metrics_port},
        )


@beat_init.connect
def _schedule_folder(sender: Any = None, **_: object) -> None:
    # `celery -A workers beat` too: beat opens its schedule file in a folder it does not
    # make (`airlock beat` makes it before, or refuses in one line)
    filename = getattr(sender, "schedule_filename", None)
    if filename:
        Path(filename).parent.mkdir(parents=True, exist_ok=True)


def nodes_of_this_host(timeout: float) -> list[str]:
    """The worker nodes on this host (``name@hostname``, whatever their names) that
    answer a ping over the broker within ``timeout`` seconds."""
    host = socket.gethostname()
    replies = app.control.ping(timeout=timeout) or []
    return sorted(node for reply in replies for node in reply if node.partition("@")[2] == host)


THREADS_POOL = "celery.concurrency.thread"
SOLO_POOL = "celery.concurrency.solo"


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
    if getattr(pool_cls, "__module__", None) == SOLO_POOL:
        # a solo worker runs its tasks in this thread, as a pool child runs them in its own
        service().hold_connections()


@worker_process_init.connect
def _fresh_connections(**_: object) -> None:
    # a forked child must not share the parent's database connections; its tasks run
    # in this thread, which keeps its own between them
    if _provided:
        _provided[0][1]()
    service().hold_connections()


@app.task(bind=True, name=RUN_SEGMENT, max_retries=None)
def run_segment(self: Task[Any, Any], run_id: str, take_over: str | None = None) -> str:
    owner = f"{self.request.hostname}:{os.getpid()}:{self.request.id}:{self.request.retries}"
    started = time.perf_counter()
    try:
        outcome = service().run_segment(run_id, owner, take_over=take_over).outcome.value
        metrics.observe_segment(outcome, time.perf_counter() - started)
        return outcome  # Celery logs it at INFO: "Task …[id] succeeded in …s: 'completed'"
    except Exception as exc:
        if not is_database_error(exc):
            raise
        # Nothing could be recorded. Try again later; the retry may continue our claim.
        log.warning("database unavailable; retrying", extra={"action": "segment.db_retry"})
        raise self.retry(
            exc=exc,
            countdown=backoff(self.request.retries, cap=60),
            kwargs={"run_id": run_id, "take_over": owner},
        ) from exc


@app.task(name=DELIVER)
def deliver_notifications() -> int:
    """Deliver what the outbox holds due; returns how many were delivered."""
    config = settings()
    if not config.notify_url:
        return 0
    return deliver_due(
        service(), config.notify_url, config.notify_secret, timeout=config.notify_timeout
    ).delivered


@app.task(name=NOTIFY)
def notify(event_type: EventType, run_id: str, event: object = None) -> int:
    """A notification an earlier version queued as a task of its own: into the outbox
    with it, then delivered as every other."""
    del event
    if settings().notify_url:
        service().add_notification(run_id, event_type)
    return int(deliver_notifications())


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
