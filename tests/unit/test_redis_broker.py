"""The Redis channel keeps one client per connection pool (airlock.workers.service.redis_broker); the
behaviour against a real Redis is in tests/integration/test_publisher.py."""

from __future__ import annotations

import hashlib
import inspect

from kombu.transport import redis

from airlock.workers.service import redis_broker


def test_the_override_matches_the_pinned_kombu() -> None:
    """``redis_broker.Channel._create_client`` replaces kombu's, and relies on kombu's
    ``conn_or_acquire`` calling it: when kombu changes either, this fails, so that
    someone checks whether the override is still needed."""
    create_client = redis.Channel._create_client  # type: ignore[attr-defined]
    source = inspect.getsource(redis.Channel.conn_or_acquire) + inspect.getsource(create_client)
    assert hashlib.sha256(source.encode()).hexdigest() == redis_broker.KOMBU_CREATE_CLIENT, (
        "kombu's Redis Channel.conn_or_acquire or _create_client changed: check whether "
        "kombu now keeps one client per pool (then drop workers/redis_broker.py), else "
        "update KOMBU_CREATE_CLIENT"
    )


def test_the_asynchronous_clients_are_kombus() -> None:
    assert "asynchronous" in inspect.signature(redis.Channel._create_client).parameters  # type: ignore[attr-defined]
    assert redis_broker.Transport.Channel is redis_broker.Channel
