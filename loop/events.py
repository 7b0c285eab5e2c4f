"""The event stream a loop emits: the audit record of a run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol, TypeAlias

from pydantic import Field, JsonValue, TypeAdapter

from airlock.loop.messages import JsonObject, ToolCall, Usage
from airlock.loop.policy.verdicts import Judgement
from airlock.loop.results import Outcome, Termination
from airlock.loop.state import PendingCall

DecisionSource = Literal["operator", "policy", "read_only", "unknown_tool", "invalid_arguments"]


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    agent: str
    input: str
    kind: Literal["request"] = "request"


@dataclass(frozen=True, slots=True)
class ModelCalled:
    run_id: str
    iteration: int
    usage: Usage
    content: str | None
    tool_calls: tuple[ToolCall, ...]
    kind: Literal["llm"] = "llm"


@dataclass(frozen=True, slots=True)
class ToolExecuted:
    run_id: str
    call_id: str
    name: str
    arguments: JsonObject
    outcome: Outcome
    result: str
    duration_ms: float
    kind: Literal["tool"] = "tool"


@dataclass(frozen=True, slots=True)
class Suspended:
    run_id: str
    turn_digest: str
    calls: tuple[PendingCall, ...]
    iterations: int
    usage: Usage
    kind: Literal["suspended"] = "suspended"


@dataclass(frozen=True, slots=True)
class PolicyShadowed:
    """What the shadow policy file would have decided of a gated call (not enforced)."""

    call_id: str
    name: str
    judgement: Judgement
    run_id: str = ""
    kind: Literal["policy_shadow"] = "policy_shadow"


@dataclass(frozen=True, slots=True)
class DecisionApplied:
    run_id: str
    turn_digest: str
    call_id: str
    name: str
    decision: Literal["approve", "deny", "edit"]
    source: DecisionSource
    reason: str | None = None
    arguments: JsonObject | None = None
    approver: str | None = None
    rule: str | None = None
    """The policy file's rule that judged the call, and the file's sha256."""
    policy_sha256: str | None = None
    kind: Literal["decision"] = "decision"


@dataclass(frozen=True, slots=True)
class Resumed:
    run_id: str
    turn_digest: str
    iterations: int
    usage: Usage
    kind: Literal["resumed"] = "resumed"


@dataclass(frozen=True, slots=True)
class Finished:
    run_id: str
    termination: Termination
    output: str | None
    iterations: int
    usage: Usage
    kind: Literal["completed"] = "completed"


LoopEvent: TypeAlias = Annotated[
    RunStarted
    | ModelCalled
    | ToolExecuted
    | Suspended
    | PolicyShadowed
    | DecisionApplied
    | Resumed
    | Finished,
    Field(discriminator="kind"),
]


class EventSink(Protocol):
    def emit(self, event: LoopEvent) -> None: ...


class EventLog:
    """A sink that keeps every event in memory."""

    def __init__(self) -> None:
        self.events: list[LoopEvent] = []

    def emit(self, event: LoopEvent) -> None:
        self.events.append(event)


class _NoSink:
    def emit(self, event: LoopEvent) -> None:
        del event


NO_SINK: EventSink = _NoSink()


class _CallableSink:
    def __init__(self, receive: Callable[[LoopEvent], object]) -> None:
        self._receive = receive

    def emit(self, event: LoopEvent) -> None:
        self._receive(event)


def as_sink(
    events: EventSink | Callable[[LoopEvent], object] | list[LoopEvent] | None,
) -> EventSink:
    """A sink is anything with ``emit(event)``; a plain callable or a list also does."""
    if events is None:
        return NO_SINK
    if isinstance(events, list):
        return _CallableSink(events.append)
    if hasattr(events, "emit"):
        return events
    return _CallableSink(events)


_EVENT_ADAPTER: TypeAdapter[LoopEvent] = TypeAdapter(LoopEvent)


def event_payload(event: LoopEvent) -> dict[str, JsonValue]:
    """The event as a JSON object (``kind`` included), ready to store."""
    payload: dict[str, JsonValue] = _EVENT_ADAPTER.dump_python(event, mode="json")
    return payload
