"""What the keeper reports about leases: a real loss once, by the segment that lost it;
never a segment that has just ended; a renewal pass that came late."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

from airlock.loop import Agent, ScriptedModel
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.service import Outcome
from airlock.workers.service.keeper import Keeper
from tests.contract.test_service import (
    BeforeSecondCall,
    Ticks,
    keeping,
    let_time_pass,
    peek_then_poke,
)

LEASE_WARNINGS = ("lease", "lost the run")


def lease_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and any(w in r.getMessage() for w in LEASE_WARNINGS)
    ]


def test_a_renewal_between_a_segments_last_write_and_its_end_is_no_loss(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The interleaving of the false alarms seen under load: the segment's final
    transition commits, then a renewal pass runs before the segment leaves ``hold``."""
    repo = RunStore(engine)
    service = keeping(repo, Agent(name="quick", model=ScriptedModel([{"content": "done"}])))
    keeper = service.keeper
    assert keeper is not None
    passes: list[tuple[set[str], set[str]]] = []
    renew_leases = repo.transitions.renew_leases
    finish = repo.transitions.finish

    def recorded(held: Mapping[str, str], lease: timedelta, *, apart: bool = False) -> set[str]:
        renewed = renew_leases(held, lease, apart=apart)
        passes.append((set(held), renewed))
        return renewed

    def finish_then_renew(*args: Any, **kwargs: Any) -> Any:
        finished = finish(*args, **kwargs)
        assert keeper.renew()  # the segment is still held: the pass runs
        return finished

    repo.transitions.renew_leases = recorded  # type: ignore[method-assign]
    repo.transitions.finish = finish_then_renew  # type: ignore[method-assign]
    run, _ = service.start_run("quick", "x")
    caplog.set_level(logging.DEBUG, logger="airlock")
    assert service.run_segment(run.id, "w1").outcome is Outcome.COMPLETED
    assert passes == [({run.id}, set())]  # the pass saw the held run, and did not renew it
    assert repo.runs.require(run.id).status is RunStatus.COMPLETED
    assert lease_warnings(caplog) == []


def test_a_lease_really_lost_is_reported_once_by_its_segment(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    repo = RunStore(engine)
    script = ScriptedModel(
        [
            {"tool_calls": [{"name": "peek", "arguments": {}}]},
            {"tool_calls": [{"name": "poke", "arguments": {}}]},
            {"content": "done"},
        ]
    )
    holder: list[Any] = []
    poked: list[str] = []

    def lose_the_lease() -> None:  # another worker took the run while the model thought
        with engine.begin() as conn:
            conn.execute(text("UPDATE agent_runs SET lease_owner = 'w2'"))
        assert holder[0].keeper.renew()  # a renewal pass finds the lease gone
        let_time_pass(holder[0], 0.2)  # and the writer tries to write the held events

    service = keeping(
        repo, peek_then_poke(BeforeSecondCall(script, lose_the_lease), lambda: poked.append("poke"))
    )
    holder.append(service)
    run, _ = service.start_run("watched", "x")
    caplog.set_level(logging.DEBUG, logger="airlock")
    assert service.run_segment(run.id, "w1").outcome is Outcome.LEASE_LOST
    assert poked == []
    (warning,) = lease_warnings(caplog)
    assert warning.startswith("lost the run's lease before recording the segment")


def test_a_renewal_pass_later_than_half_a_lease_is_reported(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    repo = RunStore(engine)
    clock = Ticks()
    keeper = Keeper(repo, timedelta(seconds=10), 0.05, clock=clock, sleep=None)
    run, _ = repo.runs.create("assistant", "x")
    caplog.set_level(logging.WARNING, logger="airlock")
    with keeper.hold(run.id, "w1", keeper.sink(run.id, "w1")):
        for at in (0.0, 3.4, 8.0):  # a third of the lease apart, then half a lease
            clock.now = at
            assert keeper.renew()
        assert lease_warnings(caplog) == []
        clock.now = 13.6  # 5.6 s after the last pass, with a 10 s lease
        assert keeper.renew()
    assert lease_warnings(caplog) == [
        "lease renewal late: 5.6 s after the last, with a lease of 10 s"
    ]
    assert not keeper.renew()  # no segment held: the renewer ends, and forgets its last pass
