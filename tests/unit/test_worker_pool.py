"""Which of Celery's pools the worker warns of as it starts (``pool_warning``)."""

from __future__ import annotations

from celery.concurrency import get_implementation

from airlock.workers.tasks.broker import NOTIFY_QUEUE, QUEUE
from airlock.workers.tasks.signals import pool_warning


def test_only_the_threads_pool_is_warned_of() -> None:
    warning = pool_warning(get_implementation("threads"))
    assert warning is not None and "celery#6941" in warning and "prefork" in warning
    for name in ("prefork", "solo"):
        assert pool_warning(get_implementation(name)) is None
    assert pool_warning(None) is None


def test_a_consumer_of_notifications_alone_is_not_warned_of_its_threads() -> None:
    threads = get_implementation("threads")
    assert pool_warning(threads, [NOTIFY_QUEUE]) is None
    assert pool_warning(threads, [QUEUE, NOTIFY_QUEUE]) is not None
