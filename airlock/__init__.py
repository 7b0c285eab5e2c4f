"""Airlock: a durable runtime for human-approved LLM agent tool calls, on Celery.

The public face: what an agent author imports (``from airlock import Agent, tool``), and
the typed client of the HTTP API (``Client``, ``AsyncClient``, ``ApprovalClient``,
``verify_notification``; all of it in ``airlock.client``).
Everything else (``airlock.loop``, ``airlock.persistence``, ``airlock.providers``,
``airlock.workers`` and their modules) is internal and may change between releases.
The names are imported when first used, so ``import airlock`` (and the ``airlock``
command, which lives under it) costs nothing until they are.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.client import ApprovalClient, AsyncClient, Client, verify_notification
    from airlock.loop import (
        Agent,
        AirlockError,
        ApprovalPolicy,
        ApprovalRequired,
        Approve,
        DecisionError,
        Deny,
        Edit,
        Effect,
        ExpiryAction,
        LoopResult,
        Model,
        ModelError,
        ModelResponse,
        RequiresApproval,
        ScriptedModel,
        StateError,
        SuspendedRunState,
        Termination,
        Tool,
        ToolContext,
        ToolLoop,
        Usage,
        tool,
    )
    from airlock.providers import AnthropicModel, OpenAIModel

_FROM = {
    **dict.fromkeys(
        (
            "Agent", "AirlockError", "ApprovalPolicy", "ApprovalRequired", "Approve",
            "DecisionError", "Deny", "Edit", "Effect", "ExpiryAction", "LoopResult", "Model",
            "ModelError", "ModelResponse", "RequiresApproval", "ScriptedModel", "StateError",
            "SuspendedRunState", "Termination", "Tool", "ToolContext", "ToolLoop", "Usage",
            "tool",
        ),
        "airlock.loop",
    ),
    "AnthropicModel": "airlock.providers",
    "OpenAIModel": "airlock.providers",
    **dict.fromkeys(
        ("ApprovalClient", "AsyncClient", "Client", "verify_notification"), "airlock.client"
    ),
}  # fmt: skip

__all__ = [
    "Agent",
    "AirlockError",
    "AnthropicModel",
    "ApprovalPolicy",
    "ApprovalRequired",
    "ApprovalClient",
    "Approve",
    "AsyncClient",
    "Client",
    "DecisionError",
    "Deny",
    "Edit",
    "Effect",
    "ExpiryAction",
    "LoopResult",
    "Model",
    "ModelError",
    "ModelResponse",
    "OpenAIModel",
    "RequiresApproval",
    "ScriptedModel",
    "StateError",
    "SuspendedRunState",
    "Termination",
    "Tool",
    "ToolContext",
    "ToolLoop",
    "Usage",
    "tool",
    "verify_notification",
]


def __getattr__(name: str) -> Any:
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module 'airlock' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once found, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
