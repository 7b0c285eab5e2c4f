"""Agents for the integration tests. Their tools append to ``AIRLOCK_TEST_OUTBOX`` so a
test can count, across processes, how often each call really ran."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from pydantic import JsonValue

from airlock.loop import (
    Agent,
    Approve,
    Effect,
    ExpiryAction,
    ModelResponse,
    ScriptedModel,
    ToolContext,
    tool,
)
from airlock.loop.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from airlock.loop.tools import ToolSchema


def _record(name: str, ctx: ToolContext) -> None:
    outbox = os.environ.get("AIRLOCK_TEST_OUTBOX")
    if outbox:
        with Path(outbox).open("a") as fh:  # O_APPEND: one short line is written whole
            fh.write(f"{name} {ctx.idempotency_key}\n")


@tool
def lookup(q: str, ctx: ToolContext, seconds: float = 0.0) -> str:
    """Look something up (read-only); may take a while."""
    _record("lookup.start", ctx)
    time.sleep(seconds)
    _record("lookup", ctx)
    return f"found {q}"


@tool(effect=Effect.WRITE)
def send_email(to: str, body: str, ctx: ToolContext, seconds: float = 0.0) -> str:
    """Send an email (a write: needs approval)."""
    _record("send_email.start", ctx)
    time.sleep(seconds)
    _record("send_email", ctx)
    return f"sent to {to}"


def w1(lookup_seconds: float = 0.0, send_seconds: float = 0.0) -> list[dict[str, JsonValue]]:
    return [
        {
            "tool_calls": [{"name": "lookup", "arguments": {"q": "42", "seconds": lookup_seconds}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        },
        {
            "tool_calls": [
                {
                    "name": "send_email",
                    "arguments": {"to": "a@example.com", "body": "hi", "seconds": send_seconds},
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 3},
        },
        {"content": "done", "usage": {"prompt_tokens": 30, "completion_tokens": 4}},
    ]


@tool(effect=Effect.WRITE)
def charge(amount: int, ctx: ToolContext, seconds: float = 0.0) -> str:
    """Charge a card (a write). The charge is made first, then the tool takes its time:
    a worker killed meanwhile leaves a side effect whose result was never recorded."""
    _record("charge", ctx)
    time.sleep(seconds)
    return f"charged {amount}"


class FreshIdsModel:
    """Like a real provider: every call it makes gets an id never seen before, so a
    repeated model call would ask for the same charge again under a new id."""

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        turn = sum(1 for m in transcript if isinstance(m, AssistantMessage))
        if turn == 0:
            call = ToolCall(f"call_{uuid.uuid4().hex}", "charge", {"amount": 5, "seconds": 4.0})
            return ModelResponse(AssistantMessage(tool_calls=(call,)), Usage(10, 2))
        return ModelResponse(AssistantMessage(content="charged"), Usage(20, 3))


class SlowModel(ScriptedModel):
    """W1's script, each call taking ``AIRLOCK_TEST_MODEL_SECONDS`` (default 2 s), or
    what the file ``model_seconds`` beside the outbox says while it exists, as a real
    model's does: the segment waits on it (``time.sleep``, which gevent's worker has
    patched to wait in its greenlet)."""

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        _record_model()
        seconds = os.environ.get("AIRLOCK_TEST_MODEL_SECONDS", "2")
        outbox = os.environ.get("AIRLOCK_TEST_OUTBOX")
        with contextlib.suppress(OSError, ValueError):
            seconds = Path(outbox or "").with_name("model_seconds").read_text()
        time.sleep(float(seconds))
        return super().complete(transcript, tools)


def _record_model() -> None:
    outbox = os.environ.get("AIRLOCK_TEST_OUTBOX")
    if outbox:
        with Path(outbox).open("a") as fh:
            fh.write("model.start -\n")


@tool
def crunch(seconds: float, ctx: ToolContext) -> str:
    """Compute for ``seconds`` (read-only), never yielding the CPU: under gevent's
    worker no other greenlet runs meanwhile."""
    _record("crunch.start", ctx)
    until, spins = time.monotonic() + seconds, 0
    while time.monotonic() < until:
        spins += 1
    _record("crunch", ctx)
    return f"crunched {spins}"


@tool(effect=Effect.WRITE, approvers=["payments"])
def pay(invoice: str, ctx: ToolContext) -> str:
    """Pay an invoice: only the payments role may approve it."""
    _record("pay", ctx)
    return f"paid {invoice}"


@tool(effect=Effect.WRITE, approvers=["treasury"], quorum=2)
def transfer(amount: int, ctx: ToolContext) -> str:
    """Move money: two distinct approvers of the treasury role must approve it."""
    _record("transfer", ctx)
    return f"moved {amount}"


@tool(effect=Effect.WRITE)
def send_note(to: str, amount: int, body: str, ctx: ToolContext) -> str:
    """Send a note about an amount (a write)."""
    _record("send_note", ctx)
    return f"noted {amount} for {to}"


@tool(effect=Effect.IDEMPOTENT_WRITE)
def refund(order_id: str, amount_cents: int, reason: str, ctx: ToolContext) -> str:
    """Refund part of an order (examples/policy.toml judges it by ``amount_cents``)."""
    _record("refund", ctx)
    return f"refunded {amount_cents} cents on order {order_id}"


class RefundModel:
    """Asks for one refund, then answers with what the tool said (a deny's reason too)."""

    def __init__(self, amount_cents: int) -> None:
        self.amount_cents = amount_cents

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        last = transcript[-1]
        if isinstance(last, ToolResultMessage):
            return ModelResponse(
                AssistantMessage(content=f"the tool said: {last.content}"), Usage()
            )
        arguments: dict[str, JsonValue] = {
            "order_id": "17",
            "amount_cents": self.amount_cents,
            "reason": "damaged",
        }
        call = ToolCall("call_0_0", "refund", arguments)
        return ModelResponse(AssistantMessage(tool_calls=(call,)), Usage())


class AskedRefundModel:
    """A refund of the amount the run's input ends with (``refund order 17: 5000``)."""

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        asked = next(m for m in transcript if isinstance(m, UserMessage)).content
        return RefundModel(int(asked.rsplit(" ", 1)[-1])).complete(transcript, tools)


HOSTILE_BODY = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def one_call(name: str, **arguments: JsonValue) -> list[dict[str, JsonValue]]:
    """Call one tool, then answer with what it returned."""
    return [
        {"tool_calls": [{"name": name, "arguments": dict(arguments)}]},
        {"content": "done"},
    ]


def _agent(name: str, steps: list[dict[str, JsonValue]], **kwargs: object) -> Agent:
    return Agent(name=name, model=ScriptedModel(steps), tools=[lookup, send_email], **kwargs)  # type: ignore[arg-type]


AGENTS = [
    Agent(
        name="policy_charge",
        model=FreshIdsModel(),
        tools=[charge],
        approval_policy=lambda tool, arguments: Approve(),
    ),
    _agent("w1", w1()),
    Agent(name="payments", model=ScriptedModel(one_call("pay", invoice="INV-7")), tools=[pay]),
    Agent(
        name="four_eyes", model=ScriptedModel(one_call("transfer", amount=100)), tools=[transfer]
    ),
    Agent(
        name="notes",
        model=ScriptedModel(
            one_call("send_note", to="ops@example.com", amount=12, body=HOSTILE_BODY)
        ),
        tools=[send_note],
    ),
    Agent(
        name="two_notes",
        model=ScriptedModel(
            [
                {
                    "tool_calls": [
                        {
                            "name": "send_note",
                            "arguments": {"to": "a@example.com", "amount": 1, "body": "first"},
                        },
                        {
                            "name": "send_note",
                            "arguments": {"to": "b@example.com", "amount": 2, "body": "second"},
                        },
                    ]
                },
                {"content": "done"},
            ]
        ),
        tools=[send_note],
    ),
    Agent(
        name="self_service",
        model=ScriptedModel(one_call("pay", invoice="INV-8")),
        tools=[pay],
        self_approval=True,
    ),
    _agent("slow_read", w1(lookup_seconds=4.0)),
    Agent(name="slow_model", model=SlowModel(w1()), tools=[lookup, send_email]),
    Agent(name="cpu_read", model=ScriptedModel(one_call("crunch", seconds=6.0)), tools=[crunch]),
    _agent("slow_write", w1(send_seconds=4.0)),
    _agent("very_slow_read", w1(lookup_seconds=16.0)),
    _agent("expires_deny", w1(), approval_ttl=timedelta(seconds=1)),
    Agent(name="refund_small", model=RefundModel(5_000), tools=[refund]),
    Agent(name="refund_large", model=RefundModel(25_000), tools=[refund]),
    Agent(name="refund_huge", model=RefundModel(600_000), tools=[refund]),
    Agent(name="refund_asked", model=AskedRefundModel(), tools=[refund]),
    # an address a model wrote, against a pattern that backtracks without end on
    # Python's re (43 characters): judged on RE2, it asks; the other one matches
    Agent(
        name="corp_note_hostile",
        model=ScriptedModel(one_call("send_note", to="a" * 42 + "!", amount=1, body="hi")),
        tools=[send_note],
    ),
    Agent(
        name="corp_note",
        model=ScriptedModel(one_call("send_note", to="pat.lee@corp.com", amount=1, body="hi")),
        tools=[send_note],
    ),
    _agent(
        "expires_cancel", w1(), approval_ttl=timedelta(seconds=1), on_expiry=ExpiryAction.CANCEL
    ),
]
