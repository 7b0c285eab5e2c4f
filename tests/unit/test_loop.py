from __future__ import annotations

import pytest

from airlock.loop import (
    Agent,
    ApprovalRequired,
    Approve,
    Ask,
    AssistantMessage,
    DecisionError,
    Deny,
    Edit,
    Effect,
    EventLog,
    LoopResult,
    ModelError,
    ScriptedModel,
    ScriptExhaustedError,
    SuspendedRunState,
    SystemMessage,
    Termination,
    ToolInvocation,
    ToolLoop,
    ToolOutcome,
    ToolResultMessage,
    Usage,
    UserMessage,
    event_payload,
    requires_approval,
    tool,
)
from airlock.loop.messages import JsonObject
from tests.unit.agents import Recorder, answer, call, calls, make_agent


def suspend(loop: ToolLoop, agent: object, text: str = "Mail customer 42") -> SuspendedRunState:
    with pytest.raises(ApprovalRequired) as info:
        loop.run(agent, text, run_id="run-1")  # type: ignore[arg-type]
    return info.value.state


def tool_results(result: LoopResult) -> list[ToolResultMessage]:
    return [m for m in result.transcript if isinstance(m, ToolResultMessage)]


def test_read_only_turns_never_pause() -> None:
    rec = Recorder()
    agent = make_agent([calls(call("lookup", q="42"), call("lookup", q="43")), answer("done")], rec)
    result = ToolLoop().run(agent, "who is 42?")
    assert result.termination is Termination.COMPLETED
    assert result.output == "done"
    assert [m.content for m in tool_results(result)] == [
        "customer 42: alice@example.com",
        "customer 43: alice@example.com",
    ]
    assert result.iterations == 2


def test_approval_rule_marker_or_write_effect() -> None:
    by_name = {t.name: t for t in Recorder().tools()}
    assert not requires_approval(by_name["lookup"])
    assert requires_approval(by_name["send_email"])
    assert requires_approval(by_name["upsert"])
    assert requires_approval(by_name["wipe"])


def test_context_parameter_is_hidden_from_the_model() -> None:
    schema = {t.name: t for t in Recorder().tools()}["send_email"].schema()
    assert set(schema.parameters["properties"]) == {"to", "body"}  # type: ignore[arg-type]


def test_mixed_turn_executes_nothing_before_the_decision() -> None:
    rec = Recorder()
    log = EventLog()
    agent = make_agent(
        [calls(call("lookup", q="42"), call("send_email", to="a@x", body="hi")), answer("ok")],
        rec,
    )
    state = suspend(ToolLoop(events=log), agent)
    assert rec.calls == []
    assert not any(e.kind == "tool" for e in log.events)
    assert [(c.name, c.requires_approval) for c in state.pending_calls] == [
        ("lookup", False),
        ("send_email", True),
    ]
    assert state.iterations == 1
    result = ToolLoop(events=log).resume(agent, state, Approve())
    assert rec.calls == [("send_email", {"to": "a@x", "body": "hi"}, "run-1:call_0_1")]
    assert result.termination is Termination.COMPLETED
    kinds = [e.kind for e in log.events]
    assert kinds == [
        "request",
        "llm",
        "suspended",
        "decision",
        "decision",
        "resumed",
        "tool",
        "tool",
        "llm",
        "completed",
    ]


def test_marker_tool_suspends() -> None:
    rec = Recorder()
    agent = make_agent([calls(call("wipe", table="users")), answer("gone")], rec)
    state = suspend(ToolLoop(), agent)
    assert [c.name for c in state.pending_calls] == ["wipe"]
    ToolLoop().resume(agent, state, Approve())
    assert [c[0] for c in rec.calls] == ["wipe"]


def test_deny_feeds_one_result_per_pending_call() -> None:
    rec = Recorder()
    agent = make_agent(
        [
            calls(call("send_email", to="a", body="1"), call("upsert", key="k", value=1)),
            answer("understood"),
        ],
        rec,
    )
    state = suspend(ToolLoop(), agent)
    result = ToolLoop().resume(agent, state, Deny(reason="not today"))
    assert rec.calls == []
    results = tool_results(result)
    assert [(r.call_id, r.content, r.is_error) for r in results] == [
        (
            "call_0_0",
            'Error: tool "send_email" was denied by the operator. Reason: not today',
            True,
        ),
        ("call_0_1", 'Error: tool "upsert" was denied by the operator. Reason: not today', True),
    ]


def test_per_call_decisions_and_edit() -> None:
    rec = Recorder()
    agent = make_agent(
        [
            calls(
                call("send_email", to="a", body="1"),
                call("send_email", to="b", body="2"),
                call("upsert", key="k", value=1),
            ),
            answer("done"),
        ],
        rec,
    )
    state = suspend(ToolLoop(), agent)
    ids = [c.id for c in state.pending_calls]
    result = ToolLoop().resume(
        agent,
        state,
        {
            ids[0]: Approve(),
            ids[1]: Deny(reason="wrong person"),
            ids[2]: Edit({"key": "k", "value": 7}),
        },
    )
    assert rec.calls == [
        ("send_email", {"to": "a", "body": "1"}, f"run-1:{ids[0]}"),
        ("upsert", {"key": "k", "value": 7}, f"run-1:{ids[2]}"),
    ]
    assert "denied by the operator. Reason: wrong person" in tool_results(result)[1].content


def test_edit_that_fails_the_schema_is_refused_and_nothing_runs() -> None:
    rec = Recorder()
    agent = make_agent(
        [
            calls(call("send_email", to="a", body="1"), call("upsert", key="k", value=1)),
            answer("x"),
        ],
        rec,
    )
    state = suspend(ToolLoop(), agent)
    with pytest.raises(DecisionError, match=r"edit of call call_0_1 refused.*value"):
        ToolLoop().resume(
            agent, state, {"call_0_0": Approve(), "call_0_1": Edit({"key": "k", "value": "many"})}
        )
    assert rec.calls == []


def test_unknown_call_ids_are_refused() -> None:
    rec = Recorder()
    agent = make_agent([calls(call("send_email", to="a", body="1")), answer("x")], rec)
    state = suspend(ToolLoop(), agent)
    with pytest.raises(DecisionError, match="unknown call ids: nope"):
        ToolLoop().resume(agent, state, {"call_0_0": Approve(), "nope": Approve()})
    assert rec.calls == []


def test_undecided_gated_calls_are_refused() -> None:
    rec = Recorder()
    agent = make_agent(
        [calls(call("lookup", q="1"), call("send_email", to="a", body="1")), answer("x")], rec
    )
    state = suspend(ToolLoop(), agent)
    with pytest.raises(DecisionError, match="no decision for calls that need approval: call_0_1"):
        ToolLoop().resume(agent, state, {"call_0_0": Approve()})
    # a read-only call needs no decision of its own
    ToolLoop().resume(agent, state, {"call_0_1": Approve()})
    assert len(rec.calls) == 1


def test_two_suspensions_fold_counters() -> None:
    rec = Recorder()
    agent = make_agent(
        [
            calls(call("lookup", q="1"), usage=(10, 1)),
            calls(call("send_email", to="a", body="1"), usage=(20, 2)),
            calls(call("upsert", key="k", value=1), usage=(30, 3)),
            answer("done", usage=(40, 4)),
        ],
        rec,
    )
    first = suspend(ToolLoop(), agent)
    assert (first.iterations, first.usage) == (2, Usage(30, 3))
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop().resume(agent, SuspendedRunState.from_json(first.to_json()), Approve())
    second = info.value.state
    assert (second.iterations, second.usage) == (3, Usage(60, 6))
    result = ToolLoop().resume(agent, SuspendedRunState.from_json(second.to_json()), Approve())
    assert (result.iterations, result.usage) == (4, Usage(100, 10))
    assert [t.name for t in result.trace] == ["lookup", "send_email", "upsert"]


def test_iteration_cap_holds_across_a_suspension() -> None:
    rec = Recorder()
    agent = make_agent(
        [
            calls(call("lookup", q="1")),
            calls(call("send_email", to="a", body="1")),
            calls(call("send_email", to="b", body="2")),
            answer("never"),
        ],
        rec,
        max_iterations=3,
    )
    state = suspend(ToolLoop(), agent)
    assert state.max_iterations == 3
    result = ToolLoop().resume(agent, state, Approve())
    assert result.termination is Termination.MAX_ITERATIONS
    assert result.iterations == 3
    # the last allowed call asked for a tool: it was not executed, but still answered
    assert [c[1]["to"] for c in rec.calls] == ["a"]
    last = tool_results(result)[-1]
    assert last.is_error and "was not executed" in last.content


def test_limits_are_run_wide_and_persisted_in_the_state() -> None:
    rec = Recorder()
    steps = [calls(call("send_email", to="a", body="1")), calls(call("lookup", q="2")), answer("x")]
    state = suspend(ToolLoop(), make_agent(steps, rec, max_iterations=2))
    result = ToolLoop().resume(make_agent(steps, rec, max_iterations=50), state, Approve())
    assert result.termination is Termination.MAX_ITERATIONS
    assert result.iterations == 2


def test_token_budget_stops_further_model_calls() -> None:
    rec = Recorder()
    agent = make_agent(
        [
            calls(call("lookup", q="1"), usage=(30, 10)),
            calls(call("send_email", to="a", body="1"), usage=(30, 10)),
            answer("fine", usage=(30, 10)),
        ],
        rec,
        token_budget=100,
    )
    state = suspend(ToolLoop(), agent)
    result = ToolLoop().resume(agent, state, Approve())
    assert result.termination is Termination.COMPLETED  # the budget is only reached by the answer
    assert result.usage.total_tokens == 120
    agent = make_agent(
        [calls(call("lookup", q="1"), usage=(60, 40)), answer("never")], rec, token_budget=100
    )
    result = ToolLoop().run(agent, "x")
    assert result.termination is Termination.BUDGET_EXHAUSTED
    assert result.iterations == 1
    assert tool_results(result)[0].is_error


def test_tool_no_longer_offered_on_resume() -> None:
    rec = Recorder()
    steps = [calls(call("send_email", to="a", body="1")), answer("ok")]
    state = suspend(ToolLoop(), make_agent(steps, rec))
    result = ToolLoop().resume(make_agent(steps, rec, drop=["send_email"]), state, Approve())
    assert rec.calls == []
    assert tool_results(result)[0].content == (
        'Error: tool "send_email" is no longer permitted and was not executed.'
    )


def test_resume_continues_without_assembly() -> None:
    rec = Recorder()
    agent = make_agent([calls(call("send_email", to="a", body="1")), answer("ok")], rec)
    result = ToolLoop().resume(agent, suspend(ToolLoop(), agent), Approve())
    assert sum(isinstance(m, SystemMessage) for m in result.transcript) == 1
    assert sum(isinstance(m, UserMessage) for m in result.transcript) == 1


def test_failing_tool_and_bad_arguments_become_error_results() -> None:
    rec = Recorder()
    log = EventLog()
    agent = make_agent(
        [
            calls(call("explode", why="disk"), call("lookup", nope=1), call("teleport", to="mars")),
            answer("recovered"),
        ],
        rec,
    )
    result = ToolLoop(events=log).run(agent, "x")
    assert result.termination is Termination.COMPLETED
    contents = [r.content for r in tool_results(result)]
    assert contents[0] == 'Error: tool "explode" failed: boom: disk'
    assert contents[1].startswith('Error: invalid arguments for tool "lookup"')
    assert "q: Field required" in contents[1]
    assert contents[2] == 'Error: unknown tool "teleport"'
    assert all(r.is_error for r in tool_results(result))
    tool_events = [event_payload(e) for e in log.events if e.kind == "tool"]
    assert [e["outcome"] for e in tool_events] == ["failed", "failed", "failed"]
    assert [t.outcome for t in result.trace] == ["failed", "failed", "failed"]


def test_write_call_with_bad_arguments_does_not_wait_for_a_person() -> None:
    rec = Recorder()
    agent = make_agent([calls(call("send_email", to="a")), answer("fixed")], rec)
    result = ToolLoop().run(agent, "x")
    assert "invalid arguments" in tool_results(result)[0].content
    assert rec.calls == []


def test_a_key_that_is_no_valid_unicode_is_bad_arguments_not_a_crash() -> None:
    """A model's lone surrogate in a key of a free-form argument: pydantic cannot dump
    it as JSON. The call is refused as bad arguments (the model is told), never run."""
    ran: list[JsonObject] = []

    @tool(effect=Effect.WRITE)
    def store(fields: dict) -> str:  # type: ignore[type-arg]  # free-form, as models send
        ran.append(fields)
        return "stored"

    agent = Agent(
        name="a",
        model=ScriptedModel([calls(call("store", fields={"\ud800": 1})), answer("ok")]),
        tools=[store],
    )
    result = ToolLoop().run(agent, "x")
    assert result.termination is Termination.COMPLETED and ran == []
    (content,) = [r.content for r in tool_results(result)]
    assert content.startswith('Error: invalid arguments for tool "store": a key holds text')


def test_policy_can_auto_approve_auto_deny_or_ask() -> None:
    rec = Recorder()
    log = EventLog()

    def policy(tool: object, arguments: dict[str, object]) -> Approve | Deny | Ask:
        if arguments.get("to") == "internal@x":
            return Approve()
        if arguments.get("to") == "spam@x":
            return Deny(reason="blocked domain")
        return Ask()

    steps = [
        calls(
            call("send_email", to="internal@x", body="1"), call("send_email", to="spam@x", body="2")
        ),
        calls(call("send_email", to="boss@x", body="3")),
        answer("done"),
    ]
    agent = make_agent(steps, rec, policy=policy)  # type: ignore[arg-type]
    state = suspend(ToolLoop(events=log), agent)
    assert [c[1]["to"] for c in rec.calls] == ["internal@x"]
    assert state.iterations == 2
    decisions = [event_payload(e) for e in log.events if e.kind == "decision"]
    assert [(d["decision"], d["source"]) for d in decisions] == [
        ("approve", "policy"),
        ("deny", "policy"),
    ]
    ToolLoop().resume(agent, state, Approve())
    assert [c[1]["to"] for c in rec.calls] == ["internal@x", "boss@x"]


def test_scripted_model_is_stateless_and_reports_running_out() -> None:
    model = ScriptedModel([{"content": "a"}])
    first = model.complete([UserMessage("x")], [])
    again = model.complete([UserMessage("x")], [])
    assert first == again
    with pytest.raises(ScriptExhaustedError, match="1 steps but was asked for turn 2"):
        model.complete([UserMessage("x"), AssistantMessage("a")], [])


def test_duplicate_call_ids_from_the_model_are_an_error() -> None:
    rec = Recorder()
    agent = make_agent(
        [
            {"tool_calls": [{"id": "c", "name": "lookup", "arguments": {"q": "1"}}]},
            {"tool_calls": [{"id": "c", "name": "lookup", "arguments": {"q": "2"}}]},
        ],
        rec,
    )
    with pytest.raises(ModelError, match="call id 'c' twice"):
        ToolLoop().run(agent, "x")


def test_executor_port_sees_every_call() -> None:
    rec = Recorder()
    seen: list[str] = []

    def executor(invocation: ToolInvocation) -> ToolOutcome:
        seen.append(invocation.context.idempotency_key)
        return invocation.invoke()

    agent = make_agent(
        [calls(call("lookup", q="1")), calls(call("upsert", key="k", value=1)), answer("x")], rec
    )
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop(executor=executor).run(agent, "x", run_id="r")
    ToolLoop(executor=executor).resume(agent, info.value.state, Approve())
    assert seen == ["r:call_0_0", "r:call_1_0"]


def test_resume_with_the_state_of_another_agent_is_refused() -> None:
    rec = Recorder()
    agent = make_agent([calls(call("send_email", to="a", body="1"))], rec)
    state = suspend(ToolLoop(), agent)
    other = make_agent([], rec)
    object.__setattr__(other, "name", "other")
    with pytest.raises(Exception, match="belongs to agent 'mailer'"):
        ToolLoop().resume(other, state, Approve())


def test_a_marker_tool_subclass_needs_little_and_a_sink_may_be_a_list() -> None:
    from airlock.loop import Agent, RequiresApproval, Tool

    wiped: list[str] = []

    class WipeTable(Tool, RequiresApproval):
        """Delete every row."""

        def run(self, table: str) -> str:
            wiped.append(table)
            return f"wiped {table}"

    wipe = WipeTable()
    assert (wipe.name, wipe.description) == ("wipe_table", "Delete every row.")
    agent = Agent(
        name="ops",
        model=ScriptedModel([calls(call("wipe_table", table="users")), answer("gone")]),
        tools=[wipe],
    )
    events: list[object] = []
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop(events=events).run(agent, "wipe users")  # type: ignore[arg-type]
    assert wiped == [] and [e.kind for e in events] == ["request", "llm", "suspended"]  # type: ignore[attr-defined]
    seen: list[str] = []
    result = ToolLoop(events=lambda e: seen.append(e.kind)).resume(
        agent, info.value.state, Approve()
    )
    assert wiped == ["users"] and result.output == "gone"
    assert seen[-1] == "completed"


def test_a_scripted_answer_can_say_what_the_calls_gave() -> None:
    """Issue 47, item 1: a script's last words quote its calls' results, so a denied
    call's run does not end saying it ran."""
    agent = make_agent(
        [calls(call("send_email", to="a", body="1")), answer("Mail: {tool_result}")], Recorder()
    )
    denied = ToolLoop().resume(agent, suspend(ToolLoop(), agent), Deny(reason="not today"))
    assert denied.output == (
        'Mail: Error: tool "send_email" was denied by the operator. Reason: not today'
    )
    approved = ToolLoop().resume(agent, suspend(ToolLoop(), agent), Approve())
    assert approved.output is not None and "denied" not in approved.output
    assert approved.output.startswith("Mail: ") and approved.output != "Mail: "
