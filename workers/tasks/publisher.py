"""Wake-ups published cheaply: Celery's own task message on a producer each thread keeps."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any

from celery import Celery
from celery.utils import uuid
from kombu import Producer
from kombu.common import maybe_declare

log = logging.getLogger("airlock")


class Publisher:
    """Publishes a task with Celery's documented ``send_task``, given a producer each
    thread keeps (its ``producer`` option): ``send_task`` on its own acquires a
    producer from the pool, declares the queue and wraps the publish in a retry for
    every message, on the path from an approval to its resume (what that costs:
    bench.publish and bench.approval_path, in BENCHMARKS.md). Celery's routing, its
    message and its publish signals are those of any ``send_task``. A publish that
    fails (a stale connection, a broker that restarts) drops the thread's producer,
    whose connection is tried once and at once, and goes Celery's own way (``send_task``
    with its pool and its retry policy: a broker that is down costs what it cost
    before). If that fails too, the error is the caller's: the run waits in the
    database, and the sweeper re-sends its wake-up."""

    def __init__(self, celery: Celery, queue: str) -> None:
        self._celery = celery
        self._queue = queue
        self._local = threading.local()
        os.register_at_fork(after_in_child=self._reset)

    def __call__(self, name: str, args: tuple[Any, ...]) -> str:
        """Publish task ``name`` with ``args``; returns the task's id."""
        task_id = uuid()
        options: dict[str, Any] = {"task_id": task_id, "queue": self._queue, "ignore_result": True}
        try:
            self._celery.send_task(name, args, producer=self._producer(), retry=False, **options)
        except Exception as exc:
            self._forget()
            log.info(
                "publish failed; publishing through Celery's pool",
                extra={"action": "broker.republish", "error": type(exc).__name__},
            )
            # the same task id: were the first one delivered after all, its duplicate
            # is a wake-up that finds nothing to claim
            self._celery.send_task(name, args, **options)
        return task_id

    def _producer(self) -> Producer:
        producer: Producer | None = getattr(self._local, "producer", None)
        if producer is not None:
            return producer
        connection = self._celery.connection_for_write()
        try:
            connection.ensure_connection(max_retries=0)  # a broker that is down: at once
            channel = connection.default_channel
            maybe_declare(self._celery.amqp.queues[self._queue], channel)
        except Exception:
            connection.release()
            raise
        producer = self._local.producer = Producer(channel, auto_declare=False)
        self._local.connection = connection
        return producer

    def _reset(self) -> None:
        """In a forked child: drop, never close, the parent's connections (closing would
        shut the socket the parent still uses)."""
        self._local = threading.local()

    def _forget(self) -> None:
        connection = getattr(self._local, "connection", None)
        self._local.__dict__.clear()
        if connection is not None:
            with contextlib.suppress(Exception):
                connection.release()
