"""The loop with a policy file: each gated call judged once, at suspension; its judgement
recorded with the call and in the events; file and code combine (the strictest wins)."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from airlock.loop import (
    ApprovalRequired,
    Approve,
    Ask,
    DecisionError,
    Deny,
    Edit,
    EventLog,
    SuspendedRunState,
    Termination,
    ToolLoop,
)
from airlock.loop.agent import ApprovalPolicy
from airlock.loop.events import DecisionApplied, PolicyShadowed, Suspended
from airlock.loop.policy import RunPolicy, parse_policy
from airlock.workers.service.policy_regex import compile_re2
from tests.unit.agents import Recorder, answer, call, calls, make_agent

POLICY = """
[[rules]]
name = "no-mail-to-evil"
tool = "send_*"
verdict = "deny"
reason = "that domain is blocked"
when = [{ path = "to", op = "regex", value = "@evil\\\\.test$" }]

[[rules]]
name = "mail-asks-leads"
tool = "send_email"
verdict = "ask"
approvers = ["leads"]
quorum = 2
edits = false
requester = "bob"

[[rules]]
name = "upserts-run"
tool = "upsert"
verdict = "allow"
"""


def agent(
    rec: Recorder, *steps: dict[str, JsonValue], code: ApprovalPolicy | None = None
) -> object:
    return make_agent([*steps, answer("done")], rec, policy=code)


def run(
    rec: Recorder,
    step: dict[str, JsonValue],
    *,
    requester: str = "bob",
    code: ApprovalPolicy | None = None,
    shadow: str | None = None,
) -> tuple[object, EventLog]:
    log = EventLog()
    policy = RunPolicy(
        parse_policy(POLICY, compile_re2),
        parse_policy(shadow, compile_re2) if shadow else None,
        requester,
        {},
    )
    loop = ToolLoop(events=log, policy=policy)
    try:
        return loop.run(agent(rec, step, code=code), "go"), log  # type: ignore[arg-type]
    except ApprovalRequired as pause:
        return pause.state, log


def test_an_allowed_call_runs_and_its_decision_names_the_rule() -> None:
    rec = Recorder()
    result, log = run(rec, calls(call("upsert", key="k", value=1)))
    assert getattr(result, "termination", None) is Termination.COMPLETED
    assert [c[0] for c in rec.calls] == ["upsert"]
    decision = next(e for e in log.events if isinstance(e, DecisionApplied))
    assert (decision.source, decision.rule) == ("policy", "upserts-run")
    assert decision.policy_sha256 == parse_policy(POLICY, compile_re2).sha256


def test_a_denied_call_feeds_the_reason_to_the_model() -> None:
    rec = Recorder()
    result, _ = run(rec, calls(call("send_email", to="m@evil.test", body="x")))
    assert rec.calls == []
    transcript = getattr(result, "transcript", ())
    assert any("that domain is blocked" in (getattr(m, "content", "") or "") for m in transcript)


def test_an_asked_call_waits_with_its_judgement_recorded() -> None:
    state, log = run(Recorder(), calls(call("send_email", to="a@x.test", body="x")))
    assert isinstance(state, SuspendedRunState)
    judged = state.pending_calls[0].policy
    assert judged is not None
    assert (judged.rule, judged.approvers, judged.quorum) == ("mail-asks-leads", (("leads",),), 2)
    suspended = next(e for e in log.events if isinstance(e, Suspended))
    assert suspended.calls[0].policy == judged
    assert SuspendedRunState.from_json(state.to_json()) == state


def test_no_rule_matched_asks() -> None:
    state, _ = run(Recorder(), calls(call("send_email", to="a@x.test", body="x")), requester="al")
    assert isinstance(state, SuspendedRunState)
    assert state.pending_calls[0].policy is not None
    assert state.pending_calls[0].policy.rule == "(no rule matched)"


def test_read_only_calls_are_never_judged() -> None:
    rec = Recorder()
    result, _ = run(rec, calls(call("lookup", q="1")))
    assert getattr(result, "termination", None) is Termination.COMPLETED


@pytest.mark.parametrize(
    ("code", "verdict", "rule"),
    [
        (lambda t, a: Deny("code says no"), "deny", "(the agent's approval_policy)"),
        (lambda t, a: Ask(), "ask", "(the agent's approval_policy)"),
        (lambda t, a: Approve(), "allow", "upserts-run"),
    ],
)
def test_file_and_code_combine_strictest_wins(
    code: ApprovalPolicy, verdict: str, rule: str
) -> None:
    rec = Recorder()
    outcome, log = run(rec, calls(call("upsert", key="k", value=1)), code=code)
    if verdict == "ask":
        assert isinstance(outcome, SuspendedRunState)
        assert outcome.pending_calls[0].policy is not None
        assert outcome.pending_calls[0].policy.rule == rule
        return
    decision = next(e for e in log.events if isinstance(e, DecisionApplied))
    assert (decision.decision, decision.rule) == (verdict.replace("allow", "approve"), rule)


def test_an_edit_is_refused_when_the_rule_allows_none() -> None:
    rec = Recorder()
    state, _ = run(rec, calls(call("send_email", to="a@x.test", body="x")))
    assert isinstance(state, SuspendedRunState)
    edit = {state.pending_calls[0].id: Edit({"to": "b@x.test", "body": "x"})}
    with pytest.raises(DecisionError, match='rule "mail-asks-leads" allows no edits'):
        ToolLoop().resume(agent(rec, calls(), code=None), state, edit)  # type: ignore[arg-type]


def test_a_shadow_file_is_recorded_and_not_enforced() -> None:
    shadow = '[[rules]]\nname = "deny-all"\nverdict = "deny"\nreason = "shadow"\n'
    rec = Recorder()
    result, log = run(rec, calls(call("upsert", key="k", value=1)), shadow=shadow)
    assert [c[0] for c in rec.calls] == ["upsert"]  # enforced: the real file allowed it
    shadowed = [e for e in log.events if isinstance(e, PolicyShadowed)]
    assert [(e.judgement.verdict, e.judgement.rule, e.run_id) for e in shadowed] == [
        ("deny", "deny-all", getattr(result, "run_id", None))
    ]
