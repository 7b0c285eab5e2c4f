"""The provider-neutral transcript: what a run said and did, as plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, TypeAlias

from pydantic import Field, JsonValue

JsonObject: TypeAlias = dict[str, JsonValue]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: JsonObject = field(default_factory=dict)
    # Set by a provider adapter when the model's arguments could not be parsed
    # (e.g. malformed JSON): the call is answered with this error, never run.
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SystemMessage:
    content: str
    role: Literal["system"] = "system"


@dataclass(frozen=True, slots=True)
class UserMessage:
    content: str
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    call_id: str
    name: str
    content: str
    is_error: bool = False
    role: Literal["tool"] = "tool"


Message: TypeAlias = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolResultMessage,
    Field(discriminator="role"),
]
