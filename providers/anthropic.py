"""The Anthropic Messages API."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, JsonValue, ValidationError

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
class AnthropicModel:
    """Anthropic Messages API.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``; ``base_url`` to
    ``ANTHROPIC_BASE_URL`` or https://api.anthropic.com. ``max_tokens`` is
    required by the API, so it has a default.
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout: float = 60.0
    temperature: float | None = None
    max_tokens: int = 1024
    version: str = "2023-06-01"
    extra: JsonObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.base_url = (
            self.base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        ).rstrip("/")
        self.api_key = self.api_key or os.environ.get("ANTHROPIC_API_KEY")

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        system = "\n\n".join(m.content for m in transcript if isinstance(m, SystemMessage))
        body: JsonObject = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": anthropic_messages(transcript),
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra)
        headers = {"anthropic-version": self.version}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return parse_anthropic(post(f"{self.base_url}/v1/messages", body, headers, self.timeout))


def anthropic_messages(transcript: Sequence[Message]) -> list[JsonValue]:
    """Instructions go to ``system``; consecutive tool results merge into one user turn."""
    out: list[JsonObject] = []
    for m in transcript:
        match m:
            case SystemMessage():
                continue
            case UserMessage(content=content):
                out.append({"role": "user", "content": content})
            case AssistantMessage(content=content, tool_calls=calls):
                blocks: list[JsonValue] = [{"type": "text", "text": content}] if content else []
                blocks += [
                    {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                    for c in calls
                ]
                out.append({"role": "assistant", "content": blocks})
            case ToolResultMessage(call_id=call_id, content=content, is_error=is_error):
                block: JsonObject = {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                }
                if is_error:
                    block["is_error"] = True
                last = out[-1] if out else None
                if last and last["role"] == "user" and isinstance(last["content"], list):
                    last["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block]})
    return list(out)


class _Block(BaseModel):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: JsonValue = None


class _AnthropicUsage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class _AnthropicResponse(BaseModel):
    content: list[_Block]
    usage: _AnthropicUsage | None = None


def parse_anthropic(payload: JsonObject) -> ModelResponse:
    try:
        response = _AnthropicResponse.model_validate(payload)
    except ValidationError as exc:
        raise ModelError(f"unexpected Messages response: {exc}") from exc
    text = "".join(b.text or "" for b in response.content if b.type == "text") or None
    calls = tuple(
        ToolCall(b.id or "", b.name or "", *parse_arguments(b.input))
        for b in response.content
        if b.type == "tool_use"
    )
    usage = response.usage or _AnthropicUsage()
    return ModelResponse(
        AssistantMessage(text, calls), Usage(usage.input_tokens, usage.output_tokens)
    )
