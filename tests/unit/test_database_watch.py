"""A worker's word on its database (issue 42): while it cannot use it, a WARNING at each
check naming the database (password hidden) and what is wrong, checks spaced by a
growing backoff; once it can, one INFO; while it can, nothing, checked now and then."""

from __future__ import annotations

import logging

import pytest

from airlock.persistence.schema import SchemaState, SchemaStatus
from airlock.workers.service.database_watch import DatabaseWatch

URL = "postgresql+psycopg://airlock:***@db:5432/airlock"
READY = SchemaStatus(SchemaState.CURRENT, URL, "head1", "head1")
AWAY = SchemaStatus(SchemaState.UNREACHABLE, URL, "head1", reason="Connection refused")


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    found = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "airlock"]
    caplog.clear()
    return found


def test_a_database_away_is_said_at_each_check_with_backoff_then_once_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = [AWAY] * 6 + [READY, READY, AWAY]
    watch = DatabaseWatch(lambda: answers.pop(0), every=30, cap=60)
    caplog.set_level(logging.INFO, logger="airlock")
    delays = [watch.step() for _ in range(6)]
    warnings = said(caplog)
    assert [level for level, _ in warnings] == [logging.WARNING] * 6
    for _, message in warnings:
        assert message.startswith(f"cannot use the database {URL}: Connection refused; ")
        assert "this worker checks again in" in message
    # 1, 2, 4, 8, 16, 32 s, each ±50%; never over the cap (60 s + 50%)
    for attempt, delay in enumerate(delays):
        assert 0.5 * 2**attempt <= delay <= 1.5 * min(60, 2**attempt)
    assert watch.step() == 30
    assert said(caplog) == [(logging.INFO, f"the database {URL} is ready")]
    assert watch.step() == 30
    assert said(caplog) == []  # still ready: nothing to say
    assert watch.step() <= 1.5  # lost again: said again, and the backoff starts over
    assert [level for level, _ in said(caplog)] == [logging.WARNING]


def test_a_check_that_fails_is_said_too(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> SchemaStatus:
        raise RuntimeError("no driver")

    caplog.set_level(logging.INFO, logger="airlock")
    assert DatabaseWatch(broken).step() <= 1.5
    [(level, message)] = said(caplog)
    assert level == logging.WARNING
    assert message.startswith("cannot check the database: RuntimeError: no driver; ")
