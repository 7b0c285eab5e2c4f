from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from pydantic import JsonValue

from airlock.loop import ApprovalRequired, SuspendedRunState, ToolLoop
from airlock.persistence.domain import Run
from airlock.persistence.store import RunStore
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


def waiting_run(repo: RunStore, owner: str = "w1") -> tuple[Run, SuspendedRunState]:
    run, _ = repo.runs.create("mailer", "Mail a")
    assert repo.transitions.claim(run.id, owner, LEASE) is not None
    state = suspended_state(run.id)
    assert repo.transitions.suspend(run.id, owner, state, expires_at=None)
    return repo.runs.require(run.id), state


APPROVE: dict[str, JsonValue] = {"decision": "approve"}
DENY: dict[str, JsonValue] = {"decision": "deny", "reason": "no"}


TABLES = ("agent_runs", "run_events", "tool_calls", "decisions")


@contextmanager
def sent_to_postgres(
    monkeypatch: pytest.MonkeyPatch, tables: tuple[str, ...] = TABLES
) -> Iterator[list[tuple[str, Any]]]:
    """Every statement on Airlock's tables that psycopg sends while the block runs, with
    its parameters: those SQLAlchemy executes and those the repository sends through the
    driver alike (not a new connection's set-up)."""
    sent: list[tuple[str, Any]] = []
    execute = psycopg.Cursor.execute

    def recording(cursor: psycopg.Cursor[Any], query: Any, params: Any = None, **kw: Any) -> Any:
        if any(table in str(query) for table in tables):
            sent.append((str(query), params))
        return execute(cursor, query, params, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", recording)
        yield sent
