"""kombu's Redis transport, with one client per connection pool instead of one per
command.

kombu makes a ``redis.Redis`` for every publish, and for every message a worker takes
and acknowledges (the unacked index's two pipelines): ``Channel.conn_or_acquire``
calls ``Channel._create_client`` each time. Making one costs CPU close to the
command's own round trip (its response callbacks are built in ``__init__``; the
figure is in BENCHMARKS.md), and a W1 run takes at least six of them across the API
and the worker.
A client holds no connection of its own (its pool does), and redis-py's clients are
safe to share between threads (and greenlets), so this channel keeps the one kombu's
``_create_client`` makes for its pool, and lets it make another when the pool is
replaced (after a fork, or when the channel closes). The asynchronous pool's clients
(the consumer's ``BRPOP``) are kombu's, unchanged.

The fix for upstream (kombu's ``kombu/transport/redis.py``, ``Channel._create_client``):
cache the synchronous client on the channel, keyed by the pool it was made for, as
here. ``KOMBU_CREATE_CLIENT`` is the digest of the pinned kombu's ``_create_client``
and ``conn_or_acquire`` (which must keep calling it): a test fails when kombu changes
either, to check whether this override is still needed (or still right).
"""

from __future__ import annotations

from typing import Any, cast

from kombu.transport import redis

KOMBU_CREATE_CLIENT = "8afdc23760ae85e8b1994be5761f63219f0c408f9cdf0d8837fce6ee9f604e92"
"""sha256 of the source of ``kombu.transport.redis.Channel.conn_or_acquire`` followed by
that of ``Channel._create_client``, which this overrides."""


class Channel(redis.Channel):
    _kept: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return cast(Any, super())._create_client(asynchronous=True)
        pool = self.pool
        kept = self._kept
        if kept is None or kept[0] is not pool:
            kept = self._kept = (pool, cast(Any, super())._create_client())
        return kept[1]


class Transport(redis.Transport):
    Channel = Channel


TRANSPORT = f"{__name__}:Transport"
