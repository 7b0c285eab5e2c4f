"""The process's ``Service`` built from the settings, given how it publishes (its
``enqueue``) and whom its transitions wake (``notify``): the Celery runtime's composition
root (``airlock.workers.tasks.wiring``) and the ``airlock`` command build it here, each
with its own publisher."""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from airlock.persistence.crypto import StateCipher
from airlock.persistence.db import make_engine
from airlock.persistence.store import RetryPolicy, RunStore
from airlock.workers.service.core import Service
from airlock.workers.service.policy_file import PolicyHolder
from airlock.workers.service.registry import Registry
from airlock.workers.service.results import Enqueue, Notify
from airlock.workers.service.segments import Limits
from airlock.workers.service.settings import Settings
from airlock.workers.service.tracing import Traces, traces_from_env


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
        traces=_traces(),
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


@lru_cache(maxsize=1)
def _traces() -> Traces:
    """The process's traces (one tracer provider, however many services it builds)."""
    return traces_from_env()
