"""``airlock worker``'s arguments for ``celery worker`` (workers.cli.launch): the defaults
added where the operator gave none, and what is refused before Celery sees it."""

from __future__ import annotations

import pytest

from workers.cli.worker_options import DEFAULT_CONCURRENCY, option, usage_error, worker_arguments

REDIS = {"AIRLOCK_BROKER_URL": "redis://redis:6379/0"}


def test_without_a_pool_celerys_default_is_run_as_given() -> None:
    assert worker_arguments(["-l", "info"], REDIS) == ["-l", "info"]


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
