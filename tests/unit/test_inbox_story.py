"""How the inbox tells a run's story and what a decision will do: every timeline line
in words (no raw JSON cut mid-word), an edit told as its changes with who made it,
the transcript of a run that moved on, and a summary made by the code that applies a
decision (a call's own choice over the turn's, a policy's verdict final)."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.loop import (
    Agent,
    ApprovalRequired,
    Approve,
    Deny,
    ScriptedModel,
    SuspendedRunState,
    ToolLoop,
    ToolResultMessage,
    tool,
)
from airlock.loop.messages import Usage
from airlock.loop.state import PendingCall
from airlock.workers.http.inbox.forms import decision_of, fields_of
from airlock.workers.http.inbox.outcome import summary
from airlock.workers.http.inbox.present import line
from airlock.workers.http.inbox.story import timeline, transcript
from airlock.workers.service.decisions import to_loop_decisions
from airlock.workers.service.views import clip
from tests.unit.agents import Recorder, answer, call, calls, make_agent


@tool
def send(to: str, amount: int) -> str:
    """Send an amount (needs approval)."""
    return f"sent {amount} to {to}"


def event(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "payload": payload, "created_at": "2026-12-06T01:02:03+00:00"}


CALLS = [
    {"id": "call_0_0", "name": "send", "arguments": {"to": "a", "amount": 1}, "preset": None},
    {"id": "call_0_1", "name": "send", "arguments": {"to": "b", "amount": 2}, "preset": None},
]
DECISION = {
    "principal": "ann",
    "approver": "ann",
    "source": "inbox",
    "auth": {"method": "inbox"},
    "decision": "deny",
    "reason": "not today",
    "calls": {"call_0_1": {"decision": "edit", "arguments": {"to": "b", "amount": 5}}},
}
EVENTS = [
    event(1, "request", input="pay them"),
    event(2, "llm", iteration=1, tool_calls=CALLS, content=None),
    event(3, "suspended", calls=CALLS, turn_digest="d" * 64),
    event(4, "decision", **DECISION),
    event(5, "resumed", iterations=1, turn_digest="d" * 64, usage={"prompt_tokens": 1}),
    event(6, "tool", call_id="call_0_1", name="send", outcome="succeeded", result="sent 5 to b"),
    event(7, "retry", error="the model timed out " * 20, attempt=1, delay=2.0),
    event(8, "completed", termination="completed", output="done"),
]


def test_clip_cuts_at_a_word_and_says_so() -> None:
    assert clip("short", 10) == "short"
    assert clip("the quick brown fox jumps", 16) == "the quick brown…"
    assert clip("a\nmultiline   text", 40) == "a multiline text"
    assert line({"ticket": "T-1", "n": 3, "tags": ["a"]}) == 'ticket=T-1, n=3, tags=["a"]'
    assert line(dict.fromkeys("abcdef", 1), most=2) == "a=1, b=1, and 4 more"


def test_the_timeline_tells_each_event_in_words_and_an_edit_with_its_changes() -> None:
    entries = {e.seq: e for e in timeline(EVENTS)}
    assert entries[3].what == "waits for a decision on send (call 1), send (call 2)"
    decided = entries[4]
    assert decided.who == "ann" and decided.auth == {"method": "inbox"}
    assert decided.what == (
        "the whole turn denied; send (call 2): approved with edits — reason: not today"
    )
    assert decided.changes == [("amount", "2", "5")]
    assert entries[5].what == "the run goes on (model calls so far: 1)"
    assert entries[6].what == "send (call 2) succeeded: sent 5 to b"
    assert entries[7].what.startswith("attempt 1 failed, tried again in 2 s: the model timed")
    assert entries[7].what.endswith("…") and len(entries[7].what) < 220
    assert all("{" not in e.what for e in entries.values())


def test_the_transcript_of_a_run_that_moved_on_comes_from_its_events() -> None:
    told = [(m["role"], m["content"]) for m in transcript(EVENTS)]
    assert told == [
        ("user", "pay them"),
        ("assistant", None),
        ("tool", 'Error: tool "send" was denied by the operator. Reason: not today'),
        ("tool", "sent 5 to b"),
    ]


def state(*calls: PendingCall) -> SuspendedRunState:
    return SuspendedRunState(
        run_id="r",
        agent_name="a",
        agent_fingerprint="",
        tool_names=("send",),
        transcript=(),
        pending_calls=calls,
        iterations=1,
        usage=Usage(0, 0),
        max_iterations=5,
        token_budget=None,
        trace=(),
        turn_digest="d" * 64,
    )


@pytest.mark.parametrize(
    ("form", "runs", "denied"),
    [
        ({"decision": "approve"}, ["c1", "c2"], []),
        ({"decision": "deny", "reason": "no"}, [], ["c1", "c2"]),
        ({"decision": "deny", "reason": "no", "call.c2": "approve"}, ["c2"], ["c1"]),
        ({"decision": "approve", "call.c1": "deny", "reason.c1": "not c1"}, ["c2"], ["c1"]),
    ],
)
def test_the_summary_gives_a_calls_own_choice_over_the_turns(
    form: dict[str, str], runs: list[str], denied: list[str]
) -> None:
    agent = Agent(name="a", model=ScriptedModel([]), tools=[send])
    waiting = state(
        PendingCall("c1", "send", {"to": "a", "amount": 1}, "write"),
        PendingCall("c2", "send", {"to": "b", "amount": 2}, "write"),
    )
    forms = {c.id: fields_of(agent, c) for c in waiting.pending_calls}
    found = summary(agent, waiting, form, forms)
    assert found.error is None
    assert [o.id for o in found.running] == runs and [o.id for o in found.denied] == denied


def test_a_policys_verdict_stands_and_a_refused_form_says_why() -> None:
    agent = Agent(name="a", model=ScriptedModel([]), tools=[send])
    waiting = state(
        PendingCall("c1", "send", {"to": "a", "amount": 1}, "write", Deny("over limit"), "policy"),
        PendingCall("c2", "send", {"to": "b", "amount": 2}, "write"),
        PendingCall("c3", "send", {"to": "c", "amount": 3}, "write", Approve(), "policy"),
    )
    forms = {c.id: fields_of(agent, c) for c in waiting.pending_calls}
    found = summary(agent, waiting, {"decision": "approve"}, forms)
    assert [o.id for o in found.running] == ["c2", "c3"]
    (policy,) = found.denied
    assert policy.told == 'Error: tool "send" was denied by the approval policy. Reason: over limit'
    refused = summary(agent, waiting, {"decision": "deny"}, forms)
    assert refused.error == "a deny needs a reason: the model is told" and not refused.outcomes
    edit = {"decision": "approve", "call.c2": "edit", "edit.c2.to": "b", "edit.c2.amount": "x"}
    assert summary(agent, waiting, edit, forms).error == "amount: must be a whole number"


CHOICES = ["", "approve", "deny", "edit"]


@pytest.mark.parametrize("whole", ["approve", "deny"])
@pytest.mark.parametrize("first", CHOICES)
@pytest.mark.parametrize("second", CHOICES)
def test_what_the_summary_says_is_what_the_loop_does(whole: str, first: str, second: str) -> None:
    """Every combination of the turn's and the calls' choices: the calls the summary
    says run are the calls that run, with its arguments; the others are told its words."""
    recorder = Recorder()
    steps = [
        calls(call("send_email", to="a", body="1"), call("upsert", key="k", value=1)),
        answer("ok"),
    ]
    agent = make_agent(steps, recorder)
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop().run(agent, "go", run_id="run-1")
    waiting = info.value.state
    form = {"decision": whole, "reason": "no", "call.call_0_0": first, "call.call_0_1": second}
    form |= {"edit.call_0_0.to": "z", "edit.call_0_0.body": "2", "reason.call_0_0": "not a"}
    form |= {"edit.call_0_1.key": "k", "edit.call_0_1.value": "9"}
    forms = {c.id: fields_of(agent, c) for c in waiting.pending_calls}
    said = summary(agent, waiting, form, forms)
    assert said.error is None

    body = decision_of(
        {**form, "turn_digest": waiting.turn_digest}, list(waiting.pending_calls), forms
    )
    result = ToolLoop().resume(agent, waiting, to_loop_decisions(body.stored(), waiting))
    ran = [(name, dict(arguments)) for name, arguments, _ in recorder.calls]
    assert ran == [(o.name, dict(o.arguments)) for o in said.running]
    told = {m.call_id: m.content for m in result.transcript if isinstance(m, ToolResultMessage)}
    assert {o.id: told[o.id] for o in said.denied} == {o.id: o.told for o in said.denied}


def test_an_event_with_no_words_of_its_own_shows_lists_in_words() -> None:
    """Issue 47, item 6: ``approved_by: []`` was shown as raw data."""
    (entry,) = timeline(
        [{"seq": 1, "kind": "tallied", "created_at": "", "payload": {"approved_by": [], "n": 1}}]
    )
    assert entry.what == "approved by=none, n=1"
    (entry,) = timeline(
        [{"seq": 2, "kind": "tallied", "created_at": "", "payload": {"approved_by": ["a", "b"]}}]
    )
    assert entry.what == "approved by=a, b"
