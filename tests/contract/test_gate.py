"""Regression tests of the gate's defects (issue 13), on both databases unless marked.

Each reproduces a defect found on the earlier code; races are forced at the
statement boundary (a hook runs the competing statement there), never slept for.
"""

from __future__ import annotations

import pytest
from pydantic import JsonValue
from sqlalchemy import Engine

from loop import (
    Agent,
    Approve,
    Ask,
    DecisionError,
    Deny,
    Effect,
    RequiresApproval,
    ScriptedModel,
    Tool,
    ToolContext,
    tool,
)
from loop.messages import JsonObject
from persistence.domain import RunStatus
from persistence.repository import RunRepository
from tests.conftest import FakeClock
from workers.decisions import CallDecisionBody, DecisionBody
from workers.registry import Registry
from workers.service import Limits, Outcome, Service
from workers.views import run_view


class Wipe(Tool, RequiresApproval):
    name = "wipe"
    description = "Delete every row of a table."

    def __init__(self, ran: list[str]) -> None:
        self.ran = ran

    def invoke(self, arguments: JsonObject, ctx: ToolContext) -> JsonValue:
        self.ran.append(f"wipe {ctx.call_id}")
        return "wiped"


def gated_tools(ran: list[str]) -> list[Tool]:
    @tool(effect=Effect.WRITE)
    def send_email(to: str, ctx: ToolContext) -> str:
        ran.append(f"send_email {ctx.call_id}")
        return f"sent to {to}"

    return [send_email, Wipe(ran)]


def deny_wipe(tool: Tool, arguments: JsonObject) -> Approve | Deny | Ask:
    return Deny(reason="never wipe") if tool.name == "wipe" else Ask()


def service_for(engine: Engine, *agents: Agent, clock: FakeClock | None = None) -> Service:
    repo = RunRepository(engine, clock=clock) if clock else RunRepository(engine)
    woken: list[str] = []
    kwargs = {"clock": clock} if clock else {}
    return Service(
        repo=repo,
        registry=Registry(agents),
        enqueue=lambda run_id, delay=None: woken.append(run_id),
        limits=Limits(retry_base_delay=0.01),
        **kwargs,  # type: ignore[arg-type]
    )


def policy_agent(ran: list[str]) -> Agent:
    steps: list[dict[str, JsonValue]] = [
        {
            "tool_calls": [
                {"id": "mail", "name": "send_email", "arguments": {"to": "a@x"}},
                {"id": "wipe", "name": "wipe", "arguments": {"table": "users"}},
            ]
        },
        {"content": "done"},
    ]
    return Agent(
        name="policed",
        model=ScriptedModel(steps),
        tools=gated_tools(ran),
        approval_policy=deny_wipe,
    )


def waiting(service: Service, agent: str) -> tuple[str, str]:
    run, _ = service.start_run(agent, "go")
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    digest = service.repo.require(run.id).turn_digest
    assert digest is not None
    return run.id, digest


# -- 1. a policy's Deny is final ------------------------------------------------------------


def test_a_turn_level_approve_does_not_override_the_policys_deny(engine: Engine) -> None:
    ran: list[str] = []
    service = service_for(engine, policy_agent(ran))
    run_id, digest = waiting(service, "policed")
    view = run_view(service, service.repo.require(run_id))
    pending = view["pending"]
    assert isinstance(pending, dict) and isinstance(pending["calls"], list)
    verdicts = {c["id"]: (c["verdict"], c["policy_reason"]) for c in pending["calls"]}  # type: ignore[call-overload,index]
    assert verdicts == {"mail": ("asks", None), "wipe": ("denied_by_policy", "never wipe")}

    service.record_decision(
        run_id, DecisionBody(turn_digest=digest, decision="approve"), source="t"
    )
    assert service.run_segment(run_id, "w").outcome is Outcome.COMPLETED
    assert ran == ["send_email mail"]
    decided = [e.payload for e in service.repo.events(run_id) if e.kind == "decision"]
    wipe = [(p["decision"], p["source"]) for p in decided if p.get("call_id") == "wipe"]
    assert wipe == [("deny", "policy")]


def test_a_decision_naming_a_call_the_policy_decided_is_refused(engine: Engine) -> None:
    ran: list[str] = []
    service = service_for(engine, policy_agent(ran))
    run_id, digest = waiting(service, "policed")
    body = DecisionBody(
        turn_digest=digest,
        decision="deny",
        calls={"wipe": CallDecisionBody(decision="approve")},
    )
    with pytest.raises(DecisionError, match="decided by the approval policy"):
        service.record_decision(run_id, body, source="t")
    assert service.repo.require(run_id).status is RunStatus.WAITING_FOR_APPROVAL
    assert service.repo.decision_for(run_id, digest) is None
    # naming only the asked call: the policy's deny still stands for the other
    only_mail = DecisionBody(
        turn_digest=digest, decision="approve", calls={"mail": CallDecisionBody(decision="approve")}
    )
    service.record_decision(run_id, only_mail, source="t")
    assert service.run_segment(run_id, "w").outcome is Outcome.COMPLETED
    assert ran == ["send_email mail"]
