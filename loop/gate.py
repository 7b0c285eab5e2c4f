"""The approval gate: which decision applies to each call of a turn unless a person
gives one (``classify``), and which applies once one did (``resolve``): a policy's
verdict is final, a person decides only the calls that asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from airlock.loop.agent import Agent
from airlock.loop.decisions import Approve, Ask, CallDecision, Decisions, Deny, Edit, PolicyVerdict
from airlock.loop.errors import AirlockError, DecisionError, ToolArgumentsError
from airlock.loop.events import DecisionSource, PolicyShadowed
from airlock.loop.messages import JsonObject, ToolCall
from airlock.loop.policy.evaluate import CallFacts
from airlock.loop.policy.run import RunPolicy
from airlock.loop.policy.verdicts import Judgement, Verdict, strictest
from airlock.loop.state import PendingCall, PresetSource, SuspendedRunState
from airlock.loop.tools import Tool, requires_approval

CODE_RULE = "(the agent's approval_policy)"
"""The rule a judgement names when the agent's code was stricter than the file."""


def classify(agent: Agent, call: ToolCall, policy: RunPolicy | None = None) -> PendingCall:
    """Classify one call of a turn: which decision applies unless a person gives one.
    With a policy file, its judgement and the agent's code combine: the strictest wins."""
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
    code = _code_verdict(agent, tool, validated)
    judged = policy.judge(_facts(agent, tool, call, policy)) if policy else None
    if judged is None:
        if isinstance(code, Approve | Deny):
            return PendingCall(call.id, call.name, call.arguments, effect, code, "policy")
        return PendingCall(call.id, call.name, call.arguments, effect)
    if code is not None:
        judged = strictest(judged, _as_judgement(code, judged.sha256))
    return _judged(call, effect, judged)


def _code_verdict(agent: Agent, tool: Tool, validated: JsonObject) -> PolicyVerdict | None:
    if agent.approval_policy is None:
        return None
    verdict = agent.approval_policy(tool, validated)
    if not isinstance(verdict, Approve | Deny | Ask):
        raise AirlockError(f"approval policy of agent {agent.name!r} returned {verdict!r}")
    return verdict


def _facts(agent: Agent, tool: Tool, call: ToolCall, policy: RunPolicy) -> CallFacts:
    """What the file judges: the arguments as the model sent them (what the approver
    sees and the digest binds), typed by the tool's schema."""
    schema = tool.schema().parameters
    return policy.facts(agent.name, tool.name, call.arguments, tool.effect.value, schema)


def _as_judgement(code: PolicyVerdict, sha256: str) -> Judgement:
    reason = code.reason if isinstance(code, Deny) else ""
    verdict: Verdict = "allow" if isinstance(code, Approve) else code.kind
    return Judgement(verdict, CODE_RULE, sha256, reason=reason)


def _judged(call: ToolCall, effect: str, judged: Judgement) -> PendingCall:
    preset: Approve | Deny | None = None
    if judged.verdict == "allow":
        preset = Approve()
    elif judged.verdict == "deny":
        preset = Deny(judged.reason)
    source: PresetSource | None = "policy" if preset is not None else None
    return PendingCall(call.id, call.name, call.arguments, effect, preset, source, policy=judged)


def shadowed(
    agent: Agent, calls: tuple[ToolCall, ...], policy: RunPolicy | None
) -> list[PolicyShadowed]:
    """What the shadow file would decide of each gated call (recorded, never enforced)."""
    if policy is None or policy.shadow is None:
        return []
    found = []
    for call in calls:
        tool = agent.tool(call.name)
        if call.error is None and tool is not None and requires_approval(tool):
            facts = _facts(agent, tool, call, policy)
            judged = policy.judge_shadow(facts)
            assert judged is not None
            found.append(PolicyShadowed(call.id, call.name, judged))
    return found


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


@dataclass(frozen=True, slots=True)
class Runs:
    """The call runs its tool, with these arguments (an edit's, or the model's)."""

    tool: Tool
    arguments: JsonObject


@dataclass(frozen=True, slots=True)
class Refused:
    """The call cannot run (malformed, an unknown tool, one no longer offered): the model
    is told ``told``, recorded as the call's failed outcome."""

    told: str


@dataclass(frozen=True, slots=True)
class Denied:
    """A decision denied the call: the model is told ``told``."""

    told: str


Settlement = Runs | Refused | Denied


def settlement(
    agent: Agent,
    tool_names: tuple[str, ...],
    call: PendingCall,
    decision: CallDecision,
    source: DecisionSource,
) -> Settlement:
    """What becomes of one call of a turn once its decision applies: the runner acts on
    it, and the inbox's preview says it, so neither can say what the other does not."""
    if call.error is not None:
        return Refused(f"Error: {call.error}")
    if call.name not in tool_names:
        return Refused(f'Error: unknown tool "{call.name}"')
    tool = agent.tool(call.name)
    if tool is None:
        return Refused(f'Error: tool "{call.name}" is no longer permitted and was not executed.')
    match decision:
        case Deny(reason=reason):
            return Denied(denial(call.name, source, reason))
        case Edit(arguments=arguments):
            return Runs(tool, arguments)
        case Approve():
            return Runs(tool, call.arguments)
        case _:
            assert_never(decision)


def acts(call: PendingCall) -> bool:
    """The call will run a tool that acts on the world: a policy approved it."""
    return isinstance(call.preset, Approve) and call.preset_source == "policy"


def by_policy(call: PendingCall) -> bool:
    """A policy's verdict is final: no person's decision overrides it."""
    return call.preset is not None and call.preset_source == "policy"


def _check_edit(agent: Agent, call: PendingCall, decision: CallDecision) -> None:
    if not isinstance(decision, Edit):
        return
    if call.policy is not None and not call.policy.edits:
        raise DecisionError(
            f'edit of call {call.id} refused: policy rule "{call.policy.rule}" allows no edits'
        )
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
