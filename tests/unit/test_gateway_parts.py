"""The MCP gateway's pure parts: the agent ``mcp``'s model, what makes two calls
identical, a held call's answer from its run, and ``AIRLOCK_MCP_WAIT``."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from airlock.loop import (
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from airlock.persistence.domain import Run, RunStatus
from airlock.workers.mcp.gateway import CALL_ID, Gateway, GatewayModel, digest, result_of
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry, UnknownAgentError
from airlock.workers.service.settings import Settings

ANN = Principal.trusted("ann")


def test_the_model_asks_exactly_the_held_call_then_says_its_answer() -> None:
    request = UserMessage(json.dumps({"tool": "bank__transfer", "arguments": {"amount": 5}}))
    first = GatewayModel().complete([request], []).message
    assert first.tool_calls == (ToolCall(CALL_ID, "bank__transfer", {"amount": 5}),)
    asked = AssistantMessage(tool_calls=first.tool_calls)
    denied = ToolResultMessage(CALL_ID, "bank__transfer", "denied: not today", True)
    second = GatewayModel().complete([request, asked, denied], []).message
    assert second.tool_calls == ()
    assert json.loads(second.content or "") == {"isError": True, "text": "denied: not today"}


def test_identical_calls_are_one_principal_one_tool_and_the_same_arguments() -> None:
    same = digest(ANN, "bank__transfer", {"to": "bob", "amount": 5})
    assert same == digest(ANN, "bank__transfer", {"amount": 5, "to": "bob"})  # key order
    assert same != digest(ANN, "bank__transfer", {"to": "bob", "amount": 6})
    assert same != digest(ANN, "bank__deposit", {"to": "bob", "amount": 5})
    assert same != digest(Principal.operator("ann"), "bank__transfer", {"to": "bob", "amount": 5})


RUN = Run(
    id="r1", agent="mcp", status=RunStatus.COMPLETED, termination="completed", input="{}",
    output=json.dumps({"isError": False, "text": "sent 5 EUR to bob"}), error=None,
    iterations=2, usage=Usage(), turn_digest=None, has_checkpoint=False, suspended_at=None,
    expires_at=None, lease_owner=None, lease_expires_at=None, attempts=1,
    idempotency_key=None, metadata={}, created_at=datetime.now(UTC),
    updated_at=datetime.now(UTC), version=1,
)  # fmt: skip


def test_a_held_call_answers_what_its_run_ended_with() -> None:
    done = result_of(RUN)
    assert (done.text, done.is_error, done.outcome) == ("sent 5 EUR to bob", False, "decided")
    assert done.meta == {"io.airlock/run": "r1", "io.airlock/status": "completed"}
    cancelled = result_of(replace(RUN, status=RunStatus.CANCELLED, output=None))
    assert cancelled.is_error and "cancelled" in cancelled.text
    failed = result_of(replace(RUN, status=RunStatus.FAILED, output=None, error="boom"))
    assert failed.is_error and "boom" in failed.text


@pytest.mark.parametrize(("given", "seconds"), [("25", 25.0), ("2m", 120.0), ("90s", 90.0)])
def test_the_wait_takes_seconds_or_a_duration(given: str, seconds: float) -> None:
    assert Settings.model_validate({"mcp_wait": given}).mcp_wait == seconds


@pytest.mark.parametrize("given", ["soon", "0", "-3", "2y", "2h", "\u0663", "\u0663s"])
def test_a_bad_wait_is_refused_naming_it(given: str) -> None:
    with pytest.raises(ValidationError, match="mcp_wait"):
        Settings.model_validate({"mcp_wait": given})


@pytest.mark.parametrize(
    ("inbox", "said"),
    [
        (
            "",
            "approval pending: run r1; an approver (not its requester) decides it with"
            " `airlock approve r1`; call again",
        ),
        (
            "/inbox",
            "approval pending: run r1; an approver (not its requester) decides it in the"
            " inbox (/inbox) or with `airlock",
        ),
    ],
)
def test_a_pending_answer_says_where_to_decide_in_one_sentence(inbox: str, said: str) -> None:
    gateway = Gateway.__new__(Gateway)  # only its inbox is read
    gateway.inbox = inbox
    answer = gateway.pending("r1")
    assert answer.is_error and answer.text.startswith(said), answer.text
    assert answer.meta == {"io.airlock/run": "r1", "io.airlock/status": "waiting_for_approval"}


def test_a_run_of_the_agent_mcp_where_no_server_is_declared_says_what_to_set() -> None:
    with pytest.raises(UnknownAgentError, match="set AIRLOCK_MCP_SERVERS"):
        Registry([]).get("mcp")


def test_a_caller_cannot_start_a_run_of_the_gateways_own_agent() -> None:
    """Found by an attack: ``POST /v1/runs`` with agent ``mcp`` ran any call its input
    named, past the gateway's judgement (a deny rule on a read among others)."""
    from airlock.loop import Agent

    registry = Registry([]).with_agent(Agent(name="mcp", model=GatewayModel(), tools=[]))
    with pytest.raises(UnknownAgentError, match="Airlock's own"):
        registry.startable("mcp")
    assert registry.get("mcp").name == "mcp"  # the gateway (and a resume) still find it


def test_a_task_shows_its_held_call_as_working_then_completed_or_cancelled() -> None:
    from typing import Any, cast

    from airlock.persistence.store import HeldCall
    from airlock.workers.mcp.tasks import created, shape

    gateway = Gateway(cast(Any, None), [], wait=1, inbox="/inbox")
    opened = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
    held = HeldCall("t1", "r1", "bank", "bank__transfer", "api:ann", True, opened)
    waiting = replace(RUN, status=RunStatus.WAITING_FOR_APPROVAL, output=None)
    task = created(held, waiting, gateway)
    assert (task["resultType"], task["taskId"], task["status"]) == ("task", "t1", "working")
    assert task["createdAt"] == "2026-12-07T10:00:00Z" and task["ttlMs"] is None
    assert task["statusMessage"] == (
        "approval pending: run r1; an approver (not its requester) decides it in the inbox"
        " (/inbox) or with `airlock approve r1`"
    )  # a task is followed by tasks/get: no word of calling again
    assert task["_meta"] == {"io.airlock/run": "r1", "io.airlock/status": "waiting_for_approval"}
    asking = shape(held, replace(waiting, status=RunStatus.QUEUED), None, gateway)
    assert (asking["status"], asking["statusMessage"]) == ("working", "asking for approval: run r1")
    making = replace(waiting, status=RunStatus.RUNNING, turn_digest="d" * 64)
    running = shape(held, making, None, gateway)
    assert running["statusMessage"] == "approved: run r1 is making the call"
    assert running["status"] == "working" and "result" not in running

    done = shape(held, RUN, result_of(RUN), gateway)
    assert done["status"] == "completed"
    assert done["result"]["content"] == [{"type": "text", "text": "sent 5 EUR to bob"}]
    assert done["result"]["isError"] is False
    failed = replace(RUN, status=RunStatus.FAILED, output=None, error="boom")
    assert shape(held, failed, result_of(failed), gateway)["result"]["isError"] is True
    cancelled = replace(RUN, status=RunStatus.CANCELLED, output=None)
    gone = shape(held, cancelled, result_of(cancelled), gateway)
    assert gone["status"] == "cancelled" and "result" not in gone


@pytest.mark.parametrize(
    ("version", "extensions", "wanted"),
    [
        ("2026-07-28", {"io.modelcontextprotocol/tasks": {}}, True),
        ("2026-07-28", {}, False),
        ("2026-07-28", None, False),
        ("2025-11-25", {"io.modelcontextprotocol/tasks": {}}, False),  # no task on that wire
    ],
)
def test_only_a_modern_request_that_declares_the_extension_gets_a_task(
    version: str, extensions: dict[str, dict[str, str]] | None, wanted: bool
) -> None:
    from types import SimpleNamespace

    from mcp_types import ClientCapabilities

    from airlock.workers.mcp.tasks import wants_task

    capabilities = ClientCapabilities(extensions=extensions)
    ctx = SimpleNamespace(
        protocol_version=version, session=SimpleNamespace(client_capabilities=capabilities)
    )
    assert wants_task(ctx) is wanted


def test_a_held_call_whose_run_ended_after_its_call_was_sent_answers_what_the_ledger_says() -> None:
    from airlock.persistence.domain import CallStatus, LedgerEntry

    def entry(status: CallStatus, result: str | None) -> LedgerEntry:
        return LedgerEntry("r1", CALL_ID, "bank__transfer", "write", status, result, False, 1)

    cancelled = replace(RUN, status=RunStatus.CANCELLED, output=None)
    ran = result_of(cancelled, entry(CallStatus.SUCCEEDED, "sent 5 EUR to bob"))
    assert (ran.text, ran.is_error, ran.sent) == ("sent 5 EUR to bob", False, True)
    failed = replace(RUN, status=RunStatus.FAILED, output=None, error="InDoubtCallError: …")
    doubt = result_of(failed, entry(CallStatus.STARTED, None))
    assert doubt.is_error and doubt.sent and "not executed" not in doubt.text
    assert doubt.text.startswith("the call was sent upstream but its outcome was never recorded")
    unsent = result_of(cancelled)
    assert unsent.text.startswith("not executed") and not unsent.sent


def test_arguments_nested_too_deep_are_refused_naming_the_limit() -> None:
    from airlock.workers.service.decisions import MAX_DEPTH, refuse_unstorable

    deep: object = "x"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    refuse_unstorable({"a": deep[0]}, "arguments")  # type: ignore[index]  # at the limit
    with pytest.raises(ValueError, match=f"nests deeper than {MAX_DEPTH} levels"):
        refuse_unstorable({"a": deep}, "arguments")


def test_a_call_of_a_run_that_ended_while_it_was_made_is_awaited_until_it_cannot_record() -> None:
    """An operator cancelled the run while its worker was making the call: the worker
    still records its outcome, so the held call is not answered ("never recorded") until
    the server's call timeout and a margin are past the run's end."""
    from types import SimpleNamespace
    from typing import Any, cast

    from airlock.persistence.domain import CallStatus, LedgerEntry
    from airlock.persistence.store import HeldCall
    from airlock.workers.mcp.gateway import DEFAULT_CALL_TIMEOUT, IN_FLIGHT_MARGIN

    now = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
    started = LedgerEntry(
        "r1", CALL_ID, "bank__transfer", "write", CallStatus.STARTED, None, False, 1
    )
    ledger = SimpleNamespace(recorded_call=lambda run_id, call_id: started)
    service = SimpleNamespace(store=SimpleNamespace(ledger=ledger), clock=lambda: now)
    gateway = Gateway(cast(Any, service), [], wait=1)  # no server declared: the default timeout
    held = HeldCall("t1", "r1", "bank", "bank__transfer", "api:ann", False)
    just = replace(RUN, status=RunStatus.CANCELLED, output=None, updated_at=now)
    assert gateway.answer_of(just, held) is None
    past = timedelta(seconds=DEFAULT_CALL_TIMEOUT + IN_FLIGHT_MARGIN + 1)
    long_ago = replace(just, updated_at=now - past)
    found = gateway.answer_of(long_ago, held)
    assert found is not None and found.text.startswith("the call was sent upstream but")
    assert gateway.answer_of(RUN, held) == result_of(RUN)  # a completed run: its output


def test_an_approver_can_edit_any_arguments_a_held_call_may_hold() -> None:
    from airlock.workers.service.decisions import MAX_DEPTH, DecisionBody

    deep: object = 1
    for _ in range(MAX_DEPTH - 1):  # the deepest arguments /mcp takes
        deep = [deep]
    edit = {"decision": "edit", "arguments": {"memo": deep}}
    body = DecisionBody.model_validate(
        {"turn_digest": "d" * 64, "decision": "approve", "calls": {"mcp_call": edit}}
    )
    assert body.calls is not None
