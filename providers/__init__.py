"""Real model providers behind the loop's ``Model`` protocol.

``OpenAIModel`` speaks OpenAI-compatible Chat Completions (OpenAI, Azure, vLLM,
Ollama, llama.cpp, LiteLLM proxies); ``AnthropicModel`` speaks the Anthropic
Messages API. They live beside ``loop/``, which stays free of I/O: ``import loop``
never opens a socket, and the providers depend on it, never the other way.

Why HTTP (httpx) and not the official SDKs: each adapter is one request shape and
one response shape, and the exact mapping of our provider-neutral transcript
(including the denial results a suspension feeds back) is spelled out here rather
than hidden in an SDK's types. Errors are typed (``ModelError.retryable``, with the
provider's ``retry-after``); the worker's backoff retries them.
"""

from __future__ import annotations

from airlock.providers.anthropic import AnthropicModel, anthropic_messages, parse_anthropic
from airlock.providers.openai import OpenAIModel, openai_messages, parse_openai

__all__ = [
    "AnthropicModel",
    "OpenAIModel",
    "anthropic_messages",
    "openai_messages",
    "parse_anthropic",
    "parse_openai",
]
