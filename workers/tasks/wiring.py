"""The composition root: the process's one Service, built from the settings, with the
Celery app (``airlock.workers.tasks.broker``) as its publisher and this process's notification
dispatcher (if it runs one) woken by its transitions. The doors get what they need from
here."""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from airlock.persistence.crypto import StateCipher
from airlock.persistence.db import make_engine
from airlock.persistence.store import RetryPolicy, RunStore
from airlock.workers.service import Enqueue, Limits, Notify, Service
from airlock.workers.service.policy_file import PolicyHolder
from airlock.workers.service.registry import Registry
from airlock.workers.service.settings import Settings, settings
from airlock.workers.tasks import broker, dispatcher


def limits_of(config: Settings) -> Limits:
    return Limits(
        lease=timedelta(seconds=config.lease_seconds),
        queued_stale_after=timedelta(seconds=config.queued_stale_after),
        max_attempts=config.max_attempts,
        retry_base_delay=config.retry_base_delay,
        retry_max_delay=config.retry_max_delay,
        sweep_interval=timedelta(seconds=config.sweep_interval),
    )


def pool_of(config: Settings) -> dict[str, int]:
    """Each PostgreSQL pool's bound: ``AIRLOCK_DB_POOL_SIZE`` connections, no overflow
    (a statement that finds none free waits for one, up to 30 s)."""
    if not config.database_url.startswith("postgres"):
        return {}
    return {"pool_size": config.db_pool_size, "max_overflow": 0}


def build_service(config: Settings, enqueue: Enqueue, notify: Notify | None = None) -> Service:
    store = RunStore(
        make_engine(config.database_url, **pool_of(config)),
        cipher=StateCipher(config.state_key),
        retry=RetryPolicy(
            seconds=config.db_retry_seconds, result_seconds=config.db_result_retry_seconds
        ),
    )
    return Service(
        store=store,
        registry=registry_of(config),
        enqueue=enqueue,
        notify=notify,
        limits=limits_of(config),
        operator_roles=config.operators,
        policy=PolicyHolder.load(config.policy, config.policy_shadow),
    )


def registry_of(config: Settings) -> Registry:
    """The agents of ``AIRLOCK_AGENTS``, and beside them the built-in agent ``mcp`` (the
    gateway's) whenever ``AIRLOCK_MCP_SERVERS`` is set."""
    registry = Registry.from_paths(config.agents)
    if config.mcp_servers is None:
        return registry
    from airlock.workers.mcp.gateway import gateway_agent  # noqa: PLC0415 - the SDK on demand
    from airlock.workers.mcp.tools import servers  # noqa: PLC0415

    return registry.with_agent(gateway_agent(list(servers().servers)))


DISPATCH_POOL = 4
"""Connections of each of a worker's notification dispatcher's own pools (at most
``AIRLOCK_DB_POOL_SIZE``): its claims and settlements use one, its reads another."""


def dispatching_service(config: Settings) -> Service:
    """The service a worker's notification dispatcher claims, reads and settles the
    outbox through: on pools of its own (``DISPATCH_POOL`` connections each), so that its
    deliveries never wait for a connection behind the segments, nor the segments
    behind them."""
    own = config.model_copy(update={"db_pool_size": min(DISPATCH_POOL, config.db_pool_size)})
    return build_service(own, broker.enqueue_segment, dispatcher.wake_up)


@lru_cache(maxsize=1)
def service() -> Service:
    """The process's service, publishing wake-ups through the Celery app; with
    notifications on, a transition wakes this process's dispatcher, if it runs one."""
    config = settings()
    notify = dispatcher.wake_up if config.notify_url else None
    return build_service(config, broker.enqueue_segment, notify)


def check_broker() -> None:
    """Raises unless the broker answers (for ``/readyz``)."""
    with broker.app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
