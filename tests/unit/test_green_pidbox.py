"""The green worker's remote control reconnects (airlock.workers.tasks.green_pidbox); the behaviour
against a real Redis restart is in tests/integration/test_faults.py."""

from __future__ import annotations

import hashlib
import inspect

from celery.worker import pidbox
from celery.worker.consumer import consumer, control

from airlock.workers.service.broker import app
from airlock.workers.tasks import green_pidbox


def test_the_override_matches_the_pinned_celery() -> None:
    """``green_pidbox.GreenPidbox.loop`` replaces Celery's ``gPidbox.loop``, and its
    ``Control`` relies on what Celery's ``Control.__init__`` sets: when Celery changes
    either, this fails, so that someone checks whether the override is still needed."""
    source = inspect.getsource(pidbox.gPidbox.loop) + inspect.getsource(control.Control.__init__)
    assert hashlib.sha256(source.encode()).hexdigest() == green_pidbox.CELERY_LOOP, (
        "Celery's gPidbox.loop or Control.__init__ changed: check whether its green "
        "remote control now reconnects after a connection error (then drop "
        "workers/tasks/green_pidbox.py and the worker_consumer setting), else update CELERY_LOOP"
    )


def test_the_consumer_runs_celerys_steps_with_this_control() -> None:
    celerys = consumer.Consumer.Blueprint.default_steps
    ours = green_pidbox.Consumer.Blueprint.default_steps
    assert green_pidbox.CELERY_CONTROL in celerys
    assert ours == [
        "airlock.workers.tasks.green_pidbox:Control" if s == green_pidbox.CELERY_CONTROL else s
        for s in celerys
    ]
    assert app.conf.worker_consumer == "airlock.workers.tasks.green_pidbox:Consumer"
