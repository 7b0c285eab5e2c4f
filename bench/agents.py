"""Agents for the benchmarks: an instant model and no-op tools."""

from __future__ import annotations

import os

from airlock.loop import Agent, Approve, Effect, ScriptedModel, tool


@tool
def lookup(q: str) -> str:
    return q


@tool(effect=Effect.WRITE)
def send_email(to: str) -> str:
    return to


INSTANT = Agent(name="instant", model=ScriptedModel([{"content": "done"}]))
NOOP_TOOL = Agent(
    name="noop_tool",
    tools=[lookup],
    model=ScriptedModel(
        [{"tool_calls": [{"name": "lookup", "arguments": {"q": "42"}}]}, {"content": "done"}]
    ),
)
W1 = Agent(
    name="w1",
    tools=[lookup, send_email],
    model=ScriptedModel(
        [
            {"tool_calls": [{"name": "lookup", "arguments": {"q": "42"}}]},
            {"tool_calls": [{"name": "send_email", "arguments": {"to": "a@example.com"}}]},
            {"content": "done"},
        ]
    ),
)
# a write its policy approves: the segment checkpoints the turn ahead of it (write-ahead),
# then starts and finishes it in the ledger
POLICY_WRITE = Agent(
    name="policy_write",
    tools=[send_email],
    model=ScriptedModel(
        [
            {"tool_calls": [{"name": "send_email", "arguments": {"to": "a@example.com"}}]},
            {"content": "done"},
        ]
    ),
    approval_policy=lambda tool, arguments: Approve(),
)
AGENTS = [INSTANT, NOOP_TOOL, W1, POLICY_WRITE]


@tool(name="send_email", effect=Effect.WRITE)
def send_mail(to: str, body: str) -> str:
    return f"sent to {to}"


# resumes the states that bench.checkpoint.state_of_size builds
MAILER = Agent(
    name="mailer",
    tools=[send_mail],
    model=ScriptedModel([{"content": "unused"}, {"content": "done"}]),
)

if os.environ.get("BENCH_TRACE"):  # bench.approval_path's timing trace
    from bench import trace

    trace.install()
