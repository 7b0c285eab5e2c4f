"""The Celery app: its configuration, the task names, the queues, beat's schedule and
the publishing of wake-ups. Every door publishes through it (the API and the CLI enqueue
by task name); the tasks are registered on it by ``airlock.workers.tasks`` (``jobs``), which
imports this module first: ``celery -A airlock.workers worker`` / ``celery -A airlock.workers beat``
load the package (``airlock.workers.app``).

The database, not the broker, is the source of truth: a message is only a
wake-up. Every task starts with a guarded claim, so a duplicate or redelivered
message is a no-op, and the beat sweeper re-sends what a broker dropped.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler
from kombu import Queue

from airlock.workers.service.settings import Settings, settings
from airlock.workers.tasks import embedded_broker, green_pidbox
from airlock.workers.tasks.publisher import Publisher

RUN_SEGMENT = "airlock.run_segment.v1"
SWEEP = "airlock.sweep.v1"
EXPIRE = "airlock.expire_approvals.v1"
PURGE = "airlock.purge.v1"
NOTIFY = "airlock.notify.v1"
DELIVER = "airlock.deliver_notifications.v1"
QUEUE = "airlock"
"""The segments' queue."""
NOTIFY_QUEUE = "airlock.notifications"
"""The queue where earlier versions sent deliveries as tasks (``NOTIFY``, ``DELIVER``):
a worker still consumes it, so that what they left there is taken. Notifications are
delivered by each worker's dispatcher now (``airlock.workers.tasks.dispatcher``), never by a
task."""


IDLE_POLL = 0.5
"""Seconds a consumer's read of the broker waits for a message before it looks again."""


def broker_options(config: Settings) -> dict[str, Any]:
    if config.embedded_broker:
        # the folders are made with a channel (airlock.workers.tasks.embedded_broker)
        # the folders are made with a channel (airlock.workers.queue.embedded_broker)
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
    # kombu's documented transport option; on Redis it is the BRPOP's timeout, how long a
    # green worker's idle consumer waits before it looks at its state again: a TERM is
    # seen within it (an idle worker stops within 2 s)
    options: dict[str, Any] = {"polling_interval": IDLE_POLL}
    if config.visibility_timeout is None:
        # A wake-up is not worth two Redis transactions per task (kombu's index of
        # unacknowledged messages, for its redelivery after the visibility timeout):
        # the database knows what is unfinished. A task whose pool process dies is
        # still requeued at once by its worker (task_reject_on_worker_lost), and the
        # messages a worker holds go back to the queue when it stops; those of a
        # worker that is killed are re-sent by the sweeper (a stale queued run, an
        # expired lease), as they were before the redelivery's hour had passed.
        return options | {"ack_emulation": False}
    # Redis redelivers an unacked message after this long, running or not:
    # it must be longer than the longest segment.
    return options | {"visibility_timeout": config.visibility_timeout}


class Schedule(PersistentScheduler):
    """Celery's persistent schedule, which makes its file's folder first: beat opens the
    file (for its banner) before any signal a handler could make it in, so
    ``celery -A airlock.workers beat`` in a folder without ``AIRLOCK_HOME`` failed at start."""

    schedule_filename: str  # set by PersistentScheduler.__init__

    def setup_schedule(self) -> None:
        Path(self.schedule_filename).parent.mkdir(parents=True, exist_ok=True)
        super().setup_schedule()


def make_app(config: Settings) -> Celery:
    celery = Celery("airlock", broker=config.broker_url)
    if config.embedded_broker:
        celery.conf.broker_transport = embedded_broker.Transport
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
        # a worker with segments in flight gives them this long before it stops; an idle
        # one stops at once (a countdown it holds is a wake-up: the sweeper re-sends it)
        worker_soft_shutdown_timeout=config.soft_shutdown_timeout,
        worker_hijack_root_logger=False,
        # Celery's consumer, whose remote control on a gevent worker outlives a broker
        # restart (airlock.workers.tasks.green_pidbox)
        worker_consumer=green_pidbox.Consumer,
        beat_scheduler=Schedule,
        beat_schedule_filename=str(config.beat_schedule),
        # the schedule is saved after every job sent, not every 3 minutes: its age says
        # whether the beat is alive (`airlock health beat`, when no sweep is recorded)
        beat_sync_every=1,
        beat_schedule=beat_schedule(config),
    )
    return celery


def beat_schedule(config: Settings) -> dict[str, dict[str, Any]]:
    """Beat's jobs (notifications are no job of beat's: each worker's dispatcher looks at
    the outbox itself)."""
    every = config.sweep_interval
    return {
        "sweep": {"task": SWEEP, "schedule": every},
        "expire-approvals": {"task": EXPIRE, "schedule": every},
        "purge": {"task": PURGE, "schedule": 3600.0},
    }


app = make_app(settings())


publish = Publisher(app, QUEUE)


def enqueue_segment(run_id: str, delay: float | None = None) -> None:
    if delay:
        app.send_task(RUN_SEGMENT, (run_id,), countdown=delay, queue=QUEUE, ignore_result=True)
    else:
        publish(RUN_SEGMENT, (run_id,))


def nodes_of_this_host(timeout: float) -> list[str]:
    """The worker nodes on this host (``name@hostname``, whatever their names) that
    answer a ping over the broker within ``timeout`` seconds."""
    host = socket.gethostname()
    replies = app.control.ping(timeout=timeout) or []
    return sorted(node for reply in replies for node in reply if node.partition("@")[2] == host)
