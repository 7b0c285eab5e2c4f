from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import JsonValue

from loop import ApprovalRequired, SuspendedRunState, ToolLoop
from persistence.domain import Run
from persistence.repository import RunRepository
from tests.unit.agents import Recorder, answer, call, calls, make_agent

LEASE = timedelta(seconds=30)


def suspended_state(run_id: str, body: str = "Hello", padding: int = 0) -> SuspendedRunState:
    agent = make_agent(
        [
            calls(call("lookup", q="x" * padding), usage=(10, 2)),
            calls(call("send_email", to="a@example.com", body=body), usage=(20, 3)),
            answer("done"),
        ],
        Recorder(),
    )
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop().run(agent, "Mail a", run_id=run_id)
    return info.value.state


def waiting_run(repo: RunRepository, owner: str = "w1") -> tuple[Run, SuspendedRunState]:
    run, _ = repo.create("mailer", "Mail a")
    assert repo.claim(run.id, owner, LEASE) is not None
    state = suspended_state(run.id)
    assert repo.suspend(run.id, owner, state, expires_at=None)
    return repo.require(run.id), state


APPROVE: dict[str, JsonValue] = {"decision": "approve"}
DENY: dict[str, JsonValue] = {"decision": "deny", "reason": "no"}
