"""OpenAI-compatible Chat Completions (OpenAI, Azure, vLLM, Ollama, llama.cpp, LiteLLM)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, Field, JsonValue, ValidationError

from airlock.loop.errors import ModelError
from airlock.loop.messages import (
    AssistantMessage,
    JsonObject,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from airlock.loop.model import ModelResponse
from airlock.loop.tools import ToolSchema
from airlock.providers.http import parse_arguments, post


@dataclass
class OpenAIModel:
    """OpenAI-compatible Chat Completions.

    ``api_key`` defaults to ``OPENAI_API_KEY``; ``base_url`` to ``OPENAI_BASE_URL``
    or https://api.openai.com/v1.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    temperature: float | None = None
    max_tokens: int | None = None
    extra: JsonObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base_url = (
            self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self.api_key = self.api_key or os.environ.get("OPENAI_API_KEY")

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        body: JsonObject = {"model": self.model, "messages": openai_messages(transcript)}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        body.update(self.extra)
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return parse_openai(post(f"{self.base_url}/chat/completions", body, headers, self.timeout))


def openai_messages(transcript: Sequence[Message]) -> list[JsonValue]:
    out: list[JsonValue] = []
    for m in transcript:
        match m:
            case SystemMessage(content=content):
                out.append({"role": "system", "content": content})
            case UserMessage(content=content):
                out.append({"role": "user", "content": content})
            case AssistantMessage(content=content, tool_calls=calls):
                message: JsonObject = {"role": "assistant", "content": content}
                if calls:
                    message["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in calls
                    ]
                out.append(message)
            case ToolResultMessage(call_id=call_id, content=content):
                out.append({"role": "tool", "tool_call_id": call_id, "content": content})
    return out


class _Function(BaseModel):
    name: str
    arguments: JsonValue = "{}"


class _OpenAICall(BaseModel):
    id: str
    function: _Function


class _OpenAIMessage(BaseModel):
    content: str | None = None
    tool_calls: list[_OpenAICall] | None = None


class _Choice(BaseModel):
    message: _OpenAIMessage


class _OpenAIUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _OpenAIResponse(BaseModel):
    choices: list[_Choice] = Field(min_length=1)
    usage: _OpenAIUsage | None = None


def parse_openai(payload: JsonObject) -> ModelResponse:
    try:
        response = _OpenAIResponse.model_validate(payload)
    except ValidationError as exc:
        raise ModelError(f"unexpected Chat Completions response: {exc}") from exc
    message = response.choices[0].message
    calls = tuple(
        ToolCall(c.id, c.function.name, *parse_arguments(c.function.arguments))
        for c in message.tool_calls or ()
    )
    usage = response.usage or _OpenAIUsage()
    return ModelResponse(
        AssistantMessage(message.content, calls),
        Usage(usage.prompt_tokens, usage.completion_tokens),
    )
