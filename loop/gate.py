"""The approval gate: which decision applies to each call of a turn unless a person
gives one (``classify``), and which applies once one did (``resolve``): a policy's
verdict is final, a person decides only the calls that asked."""

from __future__ import annotations

from loop.agent import Agent
from loop.decisions import Approve, Ask, CallDecision, Decisions, Deny, Edit
from loop.errors import AirlockError, DecisionError, ToolArgumentsError
from loop.events import DecisionSource
from loop.messages import ToolCall
from loop.state import PendingCall, SuspendedRunState
from loop.tools import requires_approval


def classify(agent: Agent, call: ToolCall) -> PendingCall:
    """Classify one call of a turn: which decision applies unless a person gives one."""
    if call.error is not None:
        return PendingCall(
            call.id, call.name, call.arguments, None, Approve(), "invalid_arguments", call.error
        )
    tool = agent.tool(call.name)
    if tool is None:
        return PendingCall(call.id, call.name, call.arguments, None, Approve(), "unknown_tool")
    effect = tool.effect.value
    if not requires_approval(tool):
        return PendingCall(call.id, call.name, call.arguments, effect, Approve(), "read_only")
    try:
        validated = tool.validate(call.arguments)
    except ToolArgumentsError:
        return PendingCall(
            call.id, call.name, call.arguments, effect, Approve(), "invalid_arguments"
        )
    if agent.approval_policy is None:
        return PendingCall(call.id, call.name, call.arguments, effect)
    match agent.approval_policy(tool, validated):
        case Ask():
            return PendingCall(call.id, call.name, call.arguments, effect)
        case Approve() | Deny() as verdict:
            return PendingCall(call.id, call.name, call.arguments, effect, verdict, "policy")
        case other:
            raise AirlockError(f"approval policy of agent {agent.name!r} returned {other!r}")


def preset_source(call: PendingCall) -> DecisionSource:
    return call.preset_source or "operator"


def resolve(
    agent: Agent,
    state: SuspendedRunState,
    decisions: Decisions,
) -> list[tuple[PendingCall, CallDecision, DecisionSource]]:
    if isinstance(decisions, Approve | Deny):
        whole: list[tuple[PendingCall, CallDecision, DecisionSource]] = []
        for call in state.pending_calls:
            if call.preset is not None and call.preset_source == "policy":
                whole.append((call, call.preset, "policy"))
            else:
                whole.append((call, decisions, "operator"))
        return whole
    known = {c.id for c in state.pending_calls}
    unknown = sorted(set(decisions) - known)
    if unknown:
        raise DecisionError(f"decisions name unknown call ids: {', '.join(unknown)}")
    final = sorted(c.id for c in state.pending_calls if by_policy(c) and c.id in decisions)
    if final:
        raise DecisionError(
            f"calls decided by the approval policy cannot be decided again: {', '.join(final)}"
        )
    resolved: list[tuple[PendingCall, CallDecision, DecisionSource]] = []
    undecided: list[str] = []
    for call in state.pending_calls:
        decision = decisions.get(call.id)
        if decision is not None:
            _check_edit(agent, call, decision)
            resolved.append((call, decision, "operator"))
        elif call.preset is not None:
            resolved.append((call, call.preset, preset_source(call)))
        else:
            undecided.append(call.id)
    if undecided:
        raise DecisionError(f"no decision for calls that need approval: {', '.join(undecided)}")
    return resolved


def denial(name: str, source: DecisionSource, reason: str) -> str:
    """What the model is told of a denied call (its tool result)."""
    by = "the approval policy" if source == "policy" else "the operator"
    message = f'Error: tool "{name}" was denied by {by}.'
    return f"{message} Reason: {reason}" if reason else message


def acts(call: PendingCall) -> bool:
    """The call will run a tool that acts on the world: a policy approved it."""
    return isinstance(call.preset, Approve) and call.preset_source == "policy"


def by_policy(call: PendingCall) -> bool:
    """A policy's verdict is final: no person's decision overrides it."""
    return call.preset is not None and call.preset_source == "policy"


def _check_edit(agent: Agent, call: PendingCall, decision: CallDecision) -> None:
    if not isinstance(decision, Edit):
        return
    tool = agent.tool(call.name)
    if tool is None:
        return  # settled as "no longer permitted"; nothing to validate against
    try:
        tool.validate(decision.arguments)
    except ToolArgumentsError as exc:
        raise DecisionError(f"edit of call {call.id} refused: {exc}") from exc


def check_decisions(
    agent: Agent,
    state: SuspendedRunState,
    decisions: Decisions,
) -> None:
    """Refuse, before anything is recorded, decisions that ``resume`` would refuse."""
    resolve(agent, state, decisions)
