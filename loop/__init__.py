"""The agent loop: pure, deterministic, no I/O of its own.

Imports only the standard library and pydantic (enforced by a test).
"""

from airlock.loop.agent import Agent, ApprovalPolicy, ExpiryAction
from airlock.loop.decisions import Approve, Ask, CallDecision, Decisions, Deny, Edit
from airlock.loop.errors import (
    AirlockError,
    DecisionError,
    ModelError,
    ScriptExhaustedError,
    StateError,
    StateVersionError,
    ToolArgumentsError,
)
from airlock.loop.events import EventLog, EventSink, LoopEvent, event_payload
from airlock.loop.gate import check_decisions
from airlock.loop.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from airlock.loop.model import Model, ModelResponse, ScriptedModel
from airlock.loop.results import LoopResult, Termination, TraceEntry
from airlock.loop.runner import (
    ApprovalRequired,
    ToolExecutor,
    ToolInvocation,
    ToolLoop,
    ToolOutcome,
    WriteAhead,
    run_directly,
)
from airlock.loop.state import SCHEMA_VERSION, PendingCall, SuspendedRunState
from airlock.loop.tools import (
    Effect,
    FunctionTool,
    RequiresApproval,
    Tool,
    ToolContext,
    ToolSchema,
    requires_approval,
    tool,
)

__all__ = [
    "SCHEMA_VERSION",
    "Agent",
    "AirlockError",
    "ApprovalPolicy",
    "ApprovalRequired",
    "Approve",
    "Ask",
    "CallDecision",
    "AssistantMessage",
    "DecisionError",
    "Decisions",
    "Deny",
    "Edit",
    "Effect",
    "EventLog",
    "EventSink",
    "ExpiryAction",
    "FunctionTool",
    "LoopEvent",
    "LoopResult",
    "Message",
    "Model",
    "ModelError",
    "ModelResponse",
    "PendingCall",
    "RequiresApproval",
    "ScriptExhaustedError",
    "ScriptedModel",
    "StateError",
    "StateVersionError",
    "SuspendedRunState",
    "SystemMessage",
    "Termination",
    "Tool",
    "ToolArgumentsError",
    "ToolCall",
    "ToolContext",
    "ToolExecutor",
    "ToolInvocation",
    "ToolLoop",
    "ToolOutcome",
    "ToolResultMessage",
    "ToolSchema",
    "TraceEntry",
    "Usage",
    "UserMessage",
    "WriteAhead",
    "check_decisions",
    "event_payload",
    "requires_approval",
    "run_directly",
    "tool",
]
