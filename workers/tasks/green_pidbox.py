"""Remote control that outlives a broker restart on a gevent (or eventlet) worker.

Celery's green pool answers remote control (``celery inspect ping``, ``control
shutdown``...) from one greenlet, ``celery.worker.pidbox.gPidbox.loop``, with a broker
connection of its own. When Redis restarts, that connection's next read raises a
connection error, the greenlet dies with it, and nothing starts another unless the
consumer itself meets the error and restarts its steps. A consumer whose every slot is
busy (segments waiting on their models) reads nothing from the broker, so it never
meets it: the worker goes on running segments, and on taking new ones once slots free
up (redis-py reconnects its pooled connections), but answers no remote control again.

This module's ``Consumer`` (the ``worker_consumer`` setting, Celery's documented way to
choose the consumer class) runs Celery's consumer with one step replaced: its
``Control``, whose green mailbox (``GreenPidbox``) reconnects after a connection error,
every ``RECONNECT_SECONDS``, until the consumer stops it. The prefork and solo pools'
mailbox is Celery's, unchanged.

No documented extension point reaches it: the mailbox is made by the consumer's
``Control`` step, so the step is replaced (Celery's ``worker_consumer`` setting, given
the class). The fix for upstream (Celery's ``celery/worker/pidbox.py``,
``gPidbox.loop``; no upstream issue or pull request was found): catch the connection's
``connection_errors`` and ``channel_errors`` around the connection's ``with`` block,
log them, wait (on the shutdown event) and connect again, as here.
``tests/unit/test_green_pidbox.py`` pins Celery's behaviour: it fails when a Celery
release reconnects by itself (then drop this module).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from celery.worker import pidbox
from celery.worker.consumer import consumer, control

RECONNECT_SECONDS = 1.0
"""How long the mailbox waits before connecting again after a connection error."""
READ_SECONDS = 0.25
"""How long each read of the mailbox waits (Celery's waits 1 s): a stopping worker waits
for the read in flight."""

CELERY_CONTROL = "celery.worker.consumer.control:Control"

log = logging.getLogger(__name__)


class GreenPidbox(pidbox.gPidbox):
    """Celery's green mailbox, reconnecting after a connection error."""

    _resets: int  # Celery's, untyped in its stubs
    _do_reset: Callable[[Any, Any], None]

    def loop(self, c: Any) -> None:
        resets = [self._resets]
        shutdown = self._node_shutdown = threading.Event()
        stopped = self._node_stopped = threading.Event()
        try:
            while not shutdown.is_set() and c.connection:
                errors = (
                    OSError,
                    *c.connection.connection_errors,
                    *c.connection.channel_errors,
                )
                try:
                    self._serve(c, shutdown, resets)
                except errors as exc:
                    if shutdown.is_set() or not c.connection:
                        break
                    log.warning(
                        "remote control lost its broker connection (%r): connecting again",
                        exc,
                        extra={"action": "worker.pidbox.reconnect"},
                    )
                    shutdown.wait(RECONNECT_SECONDS)
        finally:
            stopped.set()

    def _serve(self, c: Any, shutdown: threading.Event, resets: list[int]) -> None:
        """Celery's loop, as it is (its ``with`` block), with shorter reads."""
        with c.connection_for_read() as connection:
            log.info("pidbox: Connected to %s.", connection.as_uri())
            self._do_reset(c, connection)
            while not shutdown.is_set() and c.connection:
                if resets[0] < self._resets:
                    resets[0] += 1
                    self._do_reset(c, connection)
                with suppress(TimeoutError):  # socket.timeout
                    connection.drain_events(timeout=READ_SECONDS)


class Control(control.Control):
    """Celery's remote control step, with ``GreenPidbox`` on a green pool."""

    is_green: bool  # Celery's, untyped in its stubs

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        if self.is_green:
            self.box = GreenPidbox(c)
            # as Celery's own __init__ binds them
            self.start = self.box.start  # type: ignore[method-assign, assignment]
            self.stop = self.box.stop  # type: ignore[method-assign, assignment]
            self.shutdown = self.box.shutdown


STEPS = [
    Control if step == CELERY_CONTROL else step
    for step in consumer.Consumer.Blueprint.default_steps
]


_CeleryBlueprint: Any = consumer.Consumer.Blueprint


class Blueprint(_CeleryBlueprint):  # type: ignore[misc]
    default_steps = STEPS


class Consumer(consumer.Consumer):
    """Celery's consumer, with this module's ``Control`` step."""

    Blueprint = Blueprint
