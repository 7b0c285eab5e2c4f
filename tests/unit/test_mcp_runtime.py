"""One upstream call through the session pool, against the SDK's own ``MCPServer`` in
this process (``Client(server)``, the SDK's in-process transport): the idempotency key in
``_meta``, isError, a lost answer sent again only when that is safe, a server that
cannot be reached tried until the deadline, a session that failed replaced."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from sqlalchemy.exc import OperationalError

from airlock.workers.mcp import pool, runtime, tools
from airlock.workers.mcp.config import ServerConfig, parse_servers

CALLS: Counter[str] = Counter()
KEYS: list[str] = []
TRACES: list[object] = []
server = MCPServer("bank")


@server.tool()
def transfer(to: str, ctx: Context[Any, Any]) -> str:
    KEYS.append(str((ctx.request_context.meta or {}).get("io.airlock/idempotency-key")))
    TRACES.append((ctx.request_context.meta or {}).get("traceparent"))
    CALLS["transfer"] += 1
    return f"sent to {to}"


@server.tool()
async def slow(ctx: Context[Any, Any]) -> str:
    CALLS["slow"] += 1
    await anyio.sleep(30)  # longer than the call's deadline: its answer is lost
    return "late"


@server.tool()
def refuse() -> str:
    CALLS["refuse"] += 1
    raise ToolError("insufficient funds")


class Connects:
    """The pool's ``connect``: the in-process server, or (``down``) a refusal."""

    def __init__(self) -> None:
        self.down = False
        self.opened = 0

    def __call__(self, config: ServerConfig) -> Client:
        self.opened += 1
        if self.down:
            raise ConnectionRefusedError("connection refused")
        return Client(server, cache=None)


@pytest.fixture
def connects() -> Iterator[Connects]:
    CALLS.clear()
    KEYS.clear()
    TRACES.clear()
    connect = Connects()
    previous = dict(pool._POOLS)
    pool._POOLS.clear()
    pool._POOLS[os.getpid()] = pool.SessionPool(connect)
    yield connect
    pool._POOLS.clear()
    pool._POOLS.update(previous)


def bank(timeout: float = 5) -> ServerConfig:
    text = f'[servers.bank]\nurl = "http://in-process/mcp"\ntimeout = {timeout}\n'
    return parse_servers(text, "s.toml", {}).get("bank")


def test_the_key_travels_in_meta_and_the_session_is_reused(connects: Connects) -> None:
    for call_id in ("c1", "c2"):
        outcome = runtime.call(
            bank(), "transfer", {"to": "bob"}, idempotency_key=f"run:{call_id}", repeatable=False
        )
        assert outcome.text == "sent to bob" and not outcome.is_error
    assert KEYS == ["run:c1", "run:c2"]
    assert connects.opened == 1  # one session per server per process
    assert [d.name for d in runtime.list_tools(bank())] == ["transfer", "slow", "refuse"]


def test_the_current_span_travels_in_meta_as_traceparent(connects: Connects) -> None:
    """With traces on, the upstream call is a child of the span that makes it (a
    segment's tool span, the gateway's request); with no span current, none is sent."""
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("execute_tool transfer") as span:
        runtime.call(bank(), "transfer", {"to": "bob"}, idempotency_key="r:c1", repeatable=False)
    runtime.call(bank(), "transfer", {"to": "bob"}, idempotency_key="r:c2", repeatable=False)
    context = span.get_span_context()
    assert [
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}",
        None,
    ] == TRACES


def test_an_answer_with_is_error_is_the_tools_result(connects: Connects) -> None:
    outcome = runtime.call(bank(), "refuse", {}, idempotency_key="r:c", repeatable=False)
    assert outcome.is_error and "insufficient funds" in outcome.text


def test_a_lost_answer_is_not_sent_again_for_a_write(connects: Connects) -> None:
    with pytest.raises(runtime.McpCallError, match="did not answer within 1 s") as caught:
        runtime.call(bank(timeout=1), "slow", {}, idempotency_key="r:c", repeatable=False)
    assert caught.value.maybe_ran
    assert CALLS["slow"] == 1
    outcome = runtime.call(bank(), "transfer", {"to": "x"}, idempotency_key="r:d", repeatable=False)
    assert outcome.text == "sent to x" and connects.opened == 2  # a new session after it


def test_a_server_that_cannot_be_reached_is_tried_until_the_deadline(connects: Connects) -> None:
    connects.down = True
    with pytest.raises(runtime.McpCallError, match="is unavailable") as caught:
        runtime.call(
            bank(timeout=1), "transfer", {"to": "x"}, idempotency_key="k", repeatable=False
        )
    assert not caught.value.maybe_ran and connects.opened > 1  # nothing sent: tried again
    assert CALLS["transfer"] == 0
    connects.down = False
    assert runtime.call(bank(), "transfer", {"to": "x"}, idempotency_key="k", repeatable=False)


def test_an_unknown_tool_is_refused_by_the_server_and_nothing_runs(connects: Connects) -> None:
    outcome = runtime.call(bank(), "nope", {}, idempotency_key="k", repeatable=True)
    assert outcome.is_error and "nope" in outcome.text


def test_tools_whose_pins_cannot_be_recorded_are_offered_and_refused_as_drifted(
    connects: Connects, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    servers = parse_servers('[servers.bank]\nurl = "http://in-process/mcp"\n', "s.toml", {})

    def no_database() -> object:
        raise OperationalError("SELECT", {}, Exception("no such table: mcp_pins"))

    monkeypatch.setattr(tools, "servers", lambda: servers)
    monkeypatch.setattr(tools, "pin_store", no_database)
    offered = tools.mcp_tools("bank")
    assert [t.name for t in offered] == ["bank__transfer", "bank__slow", "bank__refuse"]
    assert {t.effect.value for t in offered} == {"write"}  # nothing declared: each asks
    assert "pins cannot be read or recorded (OperationalError)" in caplog.text
