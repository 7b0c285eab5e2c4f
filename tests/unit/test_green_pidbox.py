"""The green worker's remote control reconnects (airlock.workers.tasks.green_pidbox); the behaviour
against a real Redis restart is in tests/integration/test_faults.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery.worker import pidbox
from celery.worker.consumer import consumer

from airlock.workers.tasks import green_pidbox
from airlock.workers.tasks.broker import app


class _Lost:
    """A broker connection whose every read fails, as after a Redis restart."""

    def __init__(self) -> None:
        self.reads = 0

    def __enter__(self) -> _Lost:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def as_uri(self) -> str:
        return "redis://lost"

    def drain_events(self, timeout: float) -> None:
        self.reads += 1
        raise ConnectionError("Connection closed by server.")


def test_celerys_green_mailbox_dies_with_its_connection() -> None:
    """Pins the upstream behaviour ``green_pidbox.GreenPidbox`` works around (Celery's
    ``celery/worker/pidbox.py``, ``gPidbox.loop``; no upstream issue or pull request was
    found): the green mailbox's loop lets a connection error end it, and nothing starts
    it again, so the worker answers no remote control after a broker restart. When a
    Celery release reconnects instead, this fails: then drop the override (and the
    ``worker_consumer`` setting)."""
    lost = _Lost()
    mailbox = SimpleNamespace(_resets=0, _do_reset=lambda c, connection: None)
    consumer_ = SimpleNamespace(connection=True, connection_for_read=lambda: lost)
    with pytest.raises(ConnectionError):
        pidbox.gPidbox.loop(mailbox, consumer_)  # type: ignore[arg-type]
    assert lost.reads == 1  # no second try


def test_the_consumer_runs_celerys_steps_with_this_control() -> None:
    celerys = consumer.Consumer.Blueprint.default_steps
    ours = green_pidbox.Consumer.Blueprint.default_steps
    assert green_pidbox.CELERY_CONTROL in celerys
    assert ours == [
        green_pidbox.Control if s == green_pidbox.CELERY_CONTROL else s for s in celerys
    ]
    assert app.conf.worker_consumer is green_pidbox.Consumer
