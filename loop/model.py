"""The model port and the scripted model used by demos and tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from airlock.loop.errors import ScriptExhaustedError
from airlock.loop.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, Usage
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


RESULT = "{tool_result}"
"""In a scripted step's content: the results of the previous turn's calls."""


def _last_results(transcript: Sequence[Message]) -> list[str]:
    """The tool results after the last assistant turn, in order."""
    found: list[str] = []
    for message in reversed(transcript):
        if isinstance(message, AssistantMessage):
            break
        if isinstance(message, ToolResultMessage):
            found.append(message.content)
    return found[::-1]


class ScriptedModel:
    """Plays a fixed script, one step per model call.

    The step is chosen by the number of assistant turns already in the
    transcript, so the model keeps no state and a run resumes in any process.
    Call ids default to ``call_<turn>_<index>``, unique within the run. ``{tool_result}``
    in a step's content is replaced by the results its previous turn's calls gave (a
    denied call's is its denial), so a script's answer says what happened to them.
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
        content = step.content
        if content is not None and RESULT in content:
            content = content.replace(RESULT, "; ".join(_last_results(transcript)))
        return ModelResponse(
            message=AssistantMessage(content=content, tool_calls=calls),
            usage=Usage(step.usage.prompt_tokens, step.usage.completion_tokens),
        )
