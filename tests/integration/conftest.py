from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from airlock.workers.testing import Stack
from tests.conftest import IN_CI, migrate

REDIS_URL = os.environ.get("AIRLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379")
# the integration tests' own database number on the shared Redis (another for a parallel
# run); pytest-xdist's workers each take their own, counting down: gw0 11, gw1 10, ...
REDIS_DB = int(os.environ.get("AIRLOCK_TEST_REDIS_DB", "11")) - int(
    os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
)
if REDIS_DB < 0:
    raise RuntimeError(
        "AIRLOCK_TEST_REDIS_DB is too low for this many pytest workers: "
        "worker N uses AIRLOCK_TEST_REDIS_DB - N"
    )
SHARED_REDIS = f"{REDIS_URL}/{REDIS_DB}"
"""The tests' db on the shared Redis, flushed by each test that uses it."""

pytestmark = pytest.mark.integration


def base_config(tmp: Path, **overrides: str) -> dict[str, str]:
    config = {
        "AIRLOCK_AGENTS": "tests.integration.agents:AGENTS",
        "AIRLOCK_HOME": str(tmp / "home"),
        "AIRLOCK_LEASE_SECONDS": "3",
        "AIRLOCK_SWEEP_INTERVAL": "1",
        "AIRLOCK_QUEUED_STALE_AFTER": "3",
        "AIRLOCK_SOFT_SHUTDOWN_TIMEOUT": "0",
        "AIRLOCK_RETRY_BASE_DELAY": "0.2",
    }
    config.update(overrides)
    return config


@pytest.fixture
def shared_redis() -> str:
    url = SHARED_REDIS
    try:
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()
    except redis.RedisError as exc:
        message = f"Redis at {REDIS_URL} is not reachable: {exc}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return url


StackFactory = Callable[..., Stack]


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[StackFactory]:
    stacks: list[Stack] = []

    def make(**config: str) -> Stack:
        stack = Stack(base_config(tmp_path, **config), tmp_path)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.close()


@pytest.fixture
def stack(make_stack: StackFactory, postgres_url: str, shared_redis: str) -> Stack:
    """PostgreSQL (a fresh database) + Redis (the tests' own db number)."""
    return make_stack(AIRLOCK_DATABASE_URL=postgres_url, AIRLOCK_BROKER_URL=shared_redis)


@pytest.fixture
def embedded_stack(make_stack: StackFactory, tmp_path: Path) -> Stack:
    """The embedded defaults: SQLite and the filesystem broker, no server at all."""
    url = f"sqlite:///{tmp_path / 'airlock.db'}"
    migrate(url)
    return make_stack(AIRLOCK_DATABASE_URL=url, AIRLOCK_BROKER_URL="filesystem://")
