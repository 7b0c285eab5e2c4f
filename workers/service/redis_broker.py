"""kombu's Redis transport, with one client per connection pool instead of one per
command.

kombu makes a ``redis.Redis`` for every publish, and for every message a worker takes
and acknowledges (the unacked index's two pipelines). Making one costs CPU close to
the command's own round trip (its response callbacks are built in ``__init__``; the
figure is in BENCHMARKS.md), and a W1 run takes at least six of them across the API
and the worker.
A client holds no connection of its own (its pool does), and redis-py's clients are
safe to share between threads, so this channel keeps one for its pool, and makes
another when the pool is replaced (after a fork, or when the channel closes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis


class Channel(redis.Channel):
    _kept: tuple[Any, Any] | None = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        kept = self._kept
        if kept is None or kept[0] is not pool:
            kept = self._kept = (pool, self.Client(connection_pool=pool))
        yield kept[1]


class Transport(redis.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
