"""The model port and the scripted model used by demos and tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from airlock.loop.errors import ScriptExhaustedError
from airlock.loop.messages import AssistantMessage, Message, ToolCall, Usage
from airlock.loop.tools import ToolSchema


@dataclass(frozen=True, slots=True)
class ModelResponse:
    message: AssistantMessage
    usage: Usage


class Model(Protocol):
    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        """Return the next assistant turn. Raise ``ModelError`` on failure."""
        ...


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = None
    name: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class _Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str | None = None
    tool_calls: list[_Call] = Field(default_factory=list)
    usage: _Usage = Field(default_factory=_Usage)


class ScriptedModel:
    """Plays a fixed script, one step per model call.

    The step is chosen by the number of assistant turns already in the
    transcript, so the model keeps no state and a run resumes in any process.
    Call ids default to ``call_<turn>_<index>``, unique within the run.
    """

    def __init__(self, steps: Sequence[Mapping[str, JsonValue]]) -> None:
        self.steps = [_Step.model_validate(step) for step in steps]

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        turn = sum(1 for m in transcript if isinstance(m, AssistantMessage))
        if turn >= len(self.steps):
            raise ScriptExhaustedError(
                f"scripted model has {len(self.steps)} steps but was asked for turn {turn + 1}"
            )
        step = self.steps[turn]
        calls = tuple(
            ToolCall(id=c.id or f"call_{turn}_{i}", name=c.name, arguments=c.arguments)
            for i, c in enumerate(step.tool_calls)
        )
        return ModelResponse(
            message=AssistantMessage(content=step.content, tool_calls=calls),
            usage=Usage(step.usage.prompt_tokens, step.usage.completion_tokens),
        )
