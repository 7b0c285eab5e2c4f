"""Property: for any script and any decisions, the loop keeps its promises."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from airlock.loop import (
    ApprovalRequired,
    Approve,
    AssistantMessage,
    Deny,
    Edit,
    LoopResult,
    SuspendedRunState,
    ToolLoop,
    ToolResultMessage,
)
from tests.unit.agents import Recorder, make_agent

KINDS = ["lookup", "send_email", "upsert", "teleport"]


@dataclass(frozen=True)
class PlannedCall:
    kind: str
    decision: str  # approve | deny | edit


def arguments(kind: str, n: int) -> dict[str, JsonValue]:
    match kind:
        case "lookup":
            return {"q": str(n)}
        case "send_email":
            return {"to": f"user{n}@x", "body": "hello"}
        case "upsert":
            return {"key": f"k{n}", "value": n}
        case _:
            return {"where": "mars"}


def edited(kind: str) -> dict[str, JsonValue]:
    return (
        {"to": "edited@x", "body": "edited"} if kind == "send_email" else {"key": "e", "value": -1}
    )


planned_call = st.builds(
    PlannedCall, st.sampled_from(KINDS), st.sampled_from(["approve", "deny", "edit"])
)
turn = st.tuples(
    st.lists(planned_call, min_size=1, max_size=3),
    st.integers(0, 50),
    st.integers(0, 50),
)
scripts = st.tuples(st.lists(turn, max_size=5), st.integers(1, 7))


def steps_of(turns: list[tuple[list[PlannedCall], int, int]]) -> list[dict[str, JsonValue]]:
    steps: list[dict[str, JsonValue]] = []
    counter = itertools.count()
    for calls, prompt, completion in turns:
        steps.append(
            {
                "tool_calls": [
                    {"name": c.kind, "arguments": arguments(c.kind, next(counter))} for c in calls
                ],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
            }
        )
    steps.append({"content": "done", "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    return steps


def play(
    turns: list[tuple[list[PlannedCall], int, int]], max_iterations: int, serialise: bool
) -> tuple[LoopResult, Recorder, set[str]]:
    rec = Recorder()
    agent = make_agent(steps_of(turns), rec, max_iterations=max_iterations)
    ticks = itertools.count()
    loop = ToolLoop(clock=lambda: next(ticks) / 1000, ids=lambda: "run")
    approved: set[str] = set()
    plan = {
        f"call_{t}_{i}": c for t, (calls, _, _) in enumerate(turns) for i, c in enumerate(calls)
    }
    try:
        return loop.run(agent, "go"), rec, approved
    except ApprovalRequired as pause:
        state = pause.state
    while True:
        if serialise:
            state = SuspendedRunState.from_json(state.to_json())
        decisions: dict[str, Approve | Deny | Edit] = {}
        for pending in state.pending_calls:
            if not pending.requires_approval:
                continue
            planned = plan[pending.id]
            match planned.decision:
                case "approve":
                    decisions[pending.id] = Approve()
                    approved.add(pending.id)
                case "edit":
                    decisions[pending.id] = Edit(edited(planned.kind))
                    approved.add(pending.id)
                case _:
                    decisions[pending.id] = Deny(reason="no")
        try:
            return loop.resume(agent, state, decisions), rec, approved
        except ApprovalRequired as pause:
            state = pause.state


@settings(max_examples=150, deadline=None)
@given(scripts)
def test_loop_properties(script: tuple[list[tuple[list[PlannedCall], int, int]], int]) -> None:
    turns, max_iterations = script
    result, rec, approved = play(turns, max_iterations, serialise=True)

    # (a) every tool call of an assistant turn gets exactly one tool result, in order
    transcript = list(result.transcript)
    for index, message in enumerate(transcript):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            answers = transcript[index + 1 : index + 1 + len(message.tool_calls)]
            assert all(isinstance(a, ToolResultMessage) for a in answers)
            assert [a.call_id for a in answers if isinstance(a, ToolResultMessage)] == [
                c.id for c in message.tool_calls
            ]
    results = [m for m in transcript if isinstance(m, ToolResultMessage)]
    offered = [c for m in transcript if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert len(results) == len(offered)

    # (b) usage totals equal the sum over the model calls that were made
    made = turns[: result.iterations]
    final = [] if result.iterations <= len(turns) else [(1, 1)]
    assert result.usage.prompt_tokens == sum(p for _, p, _ in made) + sum(p for p, _ in final)
    assert result.usage.completion_tokens == sum(c for _, _, c in made) + sum(c for _, c in final)
    assert result.iterations <= max_iterations

    # (c) the write calls that executed are exactly the approved or edited ones
    executed = sorted(key.split(":")[1] for _, _, key in rec.calls)
    assert executed == sorted(approved)

    # (d) serialising at every suspension changes nothing
    direct, direct_rec, _ = play(turns, max_iterations, serialise=False)
    assert direct == result
    assert direct_rec.calls == rec.calls
