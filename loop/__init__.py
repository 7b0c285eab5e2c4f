"""The agent loop: pure, deterministic, no I/O of its own.

Imports only the standard library and pydantic (enforced by a test).
"""

from loop.agent import Agent, ApprovalPolicy, ExpiryAction
from loop.decisions import Approve, Ask, CallDecision, Decisions, Deny, Edit
from loop.errors import (
    AirlockError,
    DecisionError,
    ModelError,
    ScriptExhaustedError,
    StateError,
    StateVersionError,
    ToolArgumentsError,
)
from loop.events import EventLog, EventSink, LoopEvent, event_payload
from loop.gate import check_decisions
from loop.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from loop.model import Model, ModelResponse, ScriptedModel
from loop.results import LoopResult, Termination, TraceEntry
from loop.runner import (
    ApprovalRequired,
    ToolExecutor,
    ToolInvocation,
    ToolLoop,
    ToolOutcome,
    WriteAhead,
    run_directly,
)
from loop.state import SCHEMA_VERSION, PendingCall, SuspendedRunState
from loop.tools import (
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
