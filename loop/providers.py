"""Real model providers behind the ``Model`` protocol.

``OpenAIModel`` speaks OpenAI-compatible Chat Completions (OpenAI, Azure, vLLM,
Ollama, llama.cpp, LiteLLM proxies); ``AnthropicModel`` speaks the Anthropic
Messages API.

Why plain HTTP (``urllib``) and not the official SDKs: ``loop/`` imports only the
standard library and pydantic, so ``import loop`` never needs an SDK; each
adapter is one request shape and one response shape, and the exact mapping of
our provider-neutral transcript (including the denial results a suspension
feeds back) is spelled out here rather than hidden in an SDK's types. Retries
are not done here: errors are typed (``ModelError.retryable``, with the
provider's ``retry-after``) and the worker's backoff handles them.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.message import Message as HeaderMessage

from pydantic import BaseModel, Field, JsonValue, ValidationError

from loop.errors import ModelError
from loop.messages import (
    AssistantMessage,
    JsonObject,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from loop.model import ModelResponse
from loop.tools import ToolSchema

RETRYABLE = {408, 409, 425, 429}


def _post(url: str, body: JsonObject, headers: dict[str, str], timeout: float) -> JsonObject:
    data = json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, headers={"content-type": "application/json", **headers}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            parsed: JsonObject = json.loads(response.read())
            return parsed
    except urllib.error.HTTPError as exc:
        raise _http_error(url, exc) from exc
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise ModelError(f"could not reach the model at {url}: {exc}", retryable=True) from exc
    except ValueError as exc:
        raise ModelError(f"the model at {url} answered with invalid JSON: {exc}") from exc


def _http_error(url: str, exc: urllib.error.HTTPError) -> ModelError:
    try:
        payload = json.loads(exc.read() or b"{}")
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        detail = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        detail = exc.reason
    retryable = exc.code in RETRYABLE or exc.code >= 500
    return ModelError(
        f"model provider answered {exc.code}: {detail}",
        retryable=retryable,
        retry_after=_retry_after(exc.headers) if retryable else None,
    )


def _retry_after(headers: HeaderMessage | None) -> float | None:
    value = headers.get("retry-after") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _parse_arguments(raw: JsonValue) -> tuple[JsonObject, str | None]:
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str):
        return {}, f"the model sent arguments that are not a JSON object: {raw!r}"
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        return {}, f"the model sent arguments that are not valid JSON ({exc}): {raw[:200]!r}"
    if not isinstance(parsed, dict):
        return {}, f"the model sent arguments that are not a JSON object: {raw[:200]!r}"
    return parsed, None


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
        return parse_openai(_post(f"{self.base_url}/chat/completions", body, headers, self.timeout))


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
        ToolCall(c.id, c.function.name, *_parse_arguments(c.function.arguments))
        for c in message.tool_calls or ()
    )
    usage = response.usage or _OpenAIUsage()
    return ModelResponse(
        AssistantMessage(message.content, calls),
        Usage(usage.prompt_tokens, usage.completion_tokens),
    )


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
        return parse_anthropic(_post(f"{self.base_url}/v1/messages", body, headers, self.timeout))


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
        ToolCall(b.id or "", b.name or "", *_parse_arguments(b.input))
        for b in response.content
        if b.type == "tool_use"
    )
    usage = response.usage or _AnthropicUsage()
    return ModelResponse(
        AssistantMessage(text, calls), Usage(usage.input_tokens, usage.output_tokens)
    )
