"""``airlock worker``'s arguments for ``celery worker`` (airlock.workers.cli.launch): the defaults
added where the operator gave none, and what is refused before Celery sees it."""

from __future__ import annotations

import click
import pytest
from celery.bin.worker import worker as celery_worker

from airlock.workers.cli.worker_options import (
    DEFAULT_CONCURRENCY,
    FLAGS,
    option,
    usage_error,
    worker_arguments,
)

REDIS = {"AIRLOCK_BROKER_URL": "redis://redis:6379/0"}
GEVENT = ["-P", "gevent", "-c", str(DEFAULT_CONCURRENCY)]


@pytest.mark.parametrize("broker", ["redis://redis:6379/0", "rediss://redis:6380/0"])
def test_on_redis_without_a_pool_gevent_keeps_200_in_flight(broker: str) -> None:
    env = {"AIRLOCK_BROKER_URL": broker}
    assert worker_arguments(["-l", "info"], env) == ["-l", "info", *GEVENT]
    assert worker_arguments(["-c", "50"], env) == ["-c", "50", "-P", "gevent"]


@pytest.mark.parametrize("env", [{}, {"AIRLOCK_BROKER_URL": "filesystem://"}])
def test_the_embedded_broker_keeps_celerys_default_pool(env: dict[str, str]) -> None:
    assert worker_arguments(["-l", "info"], env) == ["-l", "info"]


@pytest.mark.parametrize(
    "pool", [["-P", "prefork"], ["-Pprefork"], ["--pool=prefork"], ["--pool", "prefork"],
             ["-EPprefork"], ["-P", "gevent", "-P", "prefork"]],
)  # fmt: skip
def test_an_operators_pool_wins_in_every_spelling(pool: list[str]) -> None:
    assert worker_arguments(pool, REDIS) == pool


@pytest.mark.parametrize("pool", [["-P", "gevent"], ["--pool=gevent"], ["-Peventlet"]])
def test_a_green_pool_keeps_200_in_flight_unless_told(pool: list[str]) -> None:
    assert worker_arguments(pool, REDIS) == [*pool, "-c", str(DEFAULT_CONCURRENCY)]
    assert worker_arguments([*pool, "-c", "50"], REDIS) == [*pool, "-c", "50"]


@pytest.mark.parametrize("pool", [["-P", "prefork"], ["--pool=solo"], ["-Pthreads"]])
def test_a_pool_of_the_operators_is_run_as_given(pool: list[str]) -> None:
    assert worker_arguments([*pool, "-l", "info"], REDIS) == [*pool, "-l", "info"]


def test_options_are_found_in_every_spelling_the_last_one_counting() -> None:
    assert option(["-P", "a", "--pool=b"], "-P", "--pool") == "b"
    assert option(["-Pc"], "-P", "--pool") == "c"
    assert option(["--pool", "d"], "-P", "--pool") == "d"
    assert option(["-l", "info"], "-P", "--pool") is None


SPELLINGS = [
    ["-P", "gevent"], ["-Pgevent"], ["--pool=gevent"], ["--pool", "gevent"], ["-P=gevent"],
    ["-EPgevent"], ["-Ec", "5"], ["-BEc5"], ["-n", "-P"], ["-n", "-Pgevent"],
    ["--hostname", "--pool=x"], ["--pool=x", "-Py"], ["--", "-P", "x"], ["-l", "info"],
    ["--without-gossip", "-P", "solo"], ["-c", "3", "--concurrency=4"], ["-Q", "-c"],
]  # fmt: skip


@pytest.mark.parametrize("args", SPELLINGS)
def test_pool_and_concurrency_are_read_as_celery_worker_reads_them(args: list[str]) -> None:
    ctx = click.Context(celery_worker)
    parsed, _, _ = celery_worker.make_parser(ctx).parse_args(list(args))
    assert option(args, "-P", "--pool") == parsed.get("pool")
    assert option(args, "-c", "--concurrency") == parsed.get("concurrency")


def test_the_flags_are_celery_workers() -> None:
    ctx = click.Context(celery_worker)
    flags = {
        name
        for param in celery_worker.get_params(ctx)
        if isinstance(param, click.Option) and param.is_flag
        for name in param.opts
    }
    assert flags == FLAGS


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["-c", "0"], "-c/--concurrency must be at least 1, not 0"),
        (["-c", "x"], "-c/--concurrency must be a whole number, not 'x'"),
        (["-l", "info", "-n"], "-n/--hostname needs a value"),
        (["-P"], "-P/--pool needs a value"),
    ],
)
def test_bad_options_are_named(args: list[str], error: str) -> None:
    assert usage_error(args) == error


def test_good_options_pass() -> None:
    assert usage_error(worker_arguments(["-P", "gevent", "-n", "w@%h"], REDIS)) is None
