"""The tool loop: run a model with tools, stop before any gated call, resume later."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NoReturn, assert_never

from airlock.loop.agent import Agent
from airlock.loop.decisions import CallDecision, Decisions, Deny, Edit
from airlock.loop.errors import ModelError, StateError, ToolArgumentsError
from airlock.loop.events import (
    DecisionApplied,
    DecisionSource,
    EventSink,
    Finished,
    LoopEvent,
    ModelCalled,
    Resumed,
    RunStarted,
    Suspended,
    ToolExecuted,
    as_sink,
)
from airlock.loop.gate import (
    Denied,
    Refused,
    Runs,
    acts,
    classify,
    preset_source,
    resolve,
    settlement,
    shadowed,
)
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
from airlock.loop.policy.run import RunPolicy
from airlock.loop.results import LoopResult, Outcome, Termination, TraceEntry
from airlock.loop.state import PendingCall, SuspendedRunState, turn_digest
from airlock.loop.tools import Tool, ToolContext, render_result


class ApprovalRequired(Exception):  # noqa: N818 - control flow, not an error
    """The run stopped before a turn that needs a person's approval.

    Catch it before any generic handler: suspension is never a failure.
    """

    def __init__(self, state: SuspendedRunState) -> None:
        names = ", ".join(c.name for c in state.pending_calls if c.requires_approval)
        super().__init__(f"run {state.run_id} waits for approval of: {names}")
        self.state = state


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """One call about to run; ``invoke()`` turns a tool's exception into an error result."""

    tool: Tool
    arguments: JsonObject
    context: ToolContext

    def invoke(self) -> ToolOutcome:
        try:
            return ToolOutcome(render_result(self.tool.invoke(self.arguments, self.context)))
        except Exception as exc:  # a failing tool is reported to the model, never crashes the run
            return ToolOutcome(f'Error: tool "{self.tool.name}" failed: {exc}', is_error=True)


ToolExecutor = Callable[[ToolInvocation], ToolOutcome]
"""The port every call runs through; ``workers/`` wraps it with the tool-call ledger."""


WriteAhead = Callable[[SuspendedRunState], None]
"""The port that durably checkpoints a turn before any of its calls acts: a redone
segment resumes from that turn, with the same call ids, and the ledger answers."""


def run_directly(invocation: ToolInvocation) -> ToolOutcome:
    return invocation.invoke()


@dataclass(slots=True)
class _Run:
    agent: Agent
    run_id: str
    tool_names: tuple[str, ...]
    transcript: list[Message]
    max_iterations: int
    token_budget: int | None
    iterations: int = 0
    usage: Usage = field(default_factory=Usage)
    trace: list[TraceEntry] = field(default_factory=list)
    call_ids: set[str] = field(default_factory=set)
    sequence: int = 0
    """Checkpoints (suspensions and write-aheads) made so far in the run."""

    def budget_reached(self) -> bool:
        return self.token_budget is not None and self.usage.total_tokens >= self.token_budget

    def at_limit(self) -> bool:
        return self.iterations >= self.max_iterations or self.budget_reached()


class ToolLoop:
    def __init__(
        self,
        events: EventSink | Callable[[LoopEvent], object] | list[LoopEvent] | None = None,
        *,
        executor: ToolExecutor = run_directly,
        write_ahead: WriteAhead | None = None,
        clock: Callable[[], float] = time.perf_counter,
        ids: Callable[[], str] = lambda: str(uuid.uuid4()),
        policy: RunPolicy | None = None,
    ) -> None:
        self._events = as_sink(events)
        self._policy = policy
        self._executor = executor
        self._write_ahead = write_ahead
        self._clock = clock
        self._ids = ids

    def run(self, agent: Agent, input: str, *, run_id: str | None = None) -> LoopResult:
        """Run until the model answers, a limit is hit, or a turn needs approval."""
        run_id = run_id or self._ids()
        transcript: list[Message] = (
            [SystemMessage(agent.instructions)] if agent.instructions else []
        )
        transcript.append(UserMessage(input))
        self._events.emit(RunStarted(run_id, agent.name, input))
        run = _Run(
            agent, run_id, agent.tool_names, transcript, agent.max_iterations, agent.token_budget
        )
        return self._drive(run)

    def resume(
        self,
        agent: Agent,
        state: SuspendedRunState,
        decisions: Decisions,
        *,
        approver: str | None = None,
    ) -> LoopResult:
        """Settle the suspended turn with ``decisions`` and continue the run.

        Every decision is checked before any call runs: unknown call ids, calls
        left undecided and edits that fail the tool's schema raise ``DecisionError``.
        """
        if state.agent_name != agent.name:
            raise StateError(f"state belongs to agent {state.agent_name!r}, not {agent.name!r}")
        resolved = resolve(agent, state, decisions)
        run = _Run(
            agent,
            state.run_id,
            state.tool_names,
            list(state.transcript),
            state.max_iterations,
            state.token_budget,
            state.iterations,
            state.usage,
            list(state.trace),
            {
                c.id
                for m in state.transcript
                if isinstance(m, AssistantMessage)
                for c in m.tool_calls
            },
            state.sequence or 0,
        )
        for call, decision, source in resolved:
            self._emit_decision(
                run,
                digest=state.turn_digest,
                call=call,
                decision=decision,
                source=source,
                approver=approver,
            )
        self._events.emit(Resumed(run.run_id, state.turn_digest, run.iterations, run.usage))
        for call, decision, source in resolved:
            run.transcript.append(self._settle(run, call, decision, source))
        return self._drive(run)

    def _drive(self, run: _Run) -> LoopResult:
        while True:
            if run.iterations >= run.max_iterations:
                return self._finish(run, Termination.MAX_ITERATIONS)
            if run.budget_reached():
                return self._finish(run, Termination.BUDGET_EXHAUSTED)
            message = self._call_model(run)
            if not message.tool_calls:
                return self._finish(run, Termination.COMPLETED)
            if run.at_limit():
                # No model call may follow, so nothing of this turn runs.
                for call in message.tool_calls:
                    run.transcript.append(_not_executed(call))
                continue
            for shadow in shadowed(run.agent, message.tool_calls, self._policy):
                self._events.emit(replace(shadow, run_id=run.run_id))
            pending = tuple(classify(run.agent, c, self._policy) for c in message.tool_calls)
            if any(p.requires_approval for p in pending):
                self._suspend(run, pending)
            digest = None  # only a policy's decision is told with the turn's digest
            if self._write_ahead is not None and any(acts(p) for p in pending):
                state = self._checkpoint(run, pending)
                self._write_ahead(state)
                digest = state.turn_digest
            for p in pending:
                assert p.preset is not None
                source = preset_source(p)
                if source == "policy":
                    digest = digest or turn_digest(run.run_id, run.sequence, pending)
                    self._emit_decision(
                        run, digest=digest, call=p, decision=p.preset, source=source, approver=None
                    )
                run.transcript.append(self._settle(run, p, p.preset, source))

    def _call_model(self, run: _Run) -> AssistantMessage:
        schemas = [t.schema() for t in run.agent.tools]
        response = run.agent.model.complete(tuple(run.transcript), schemas)
        run.iterations += 1
        run.usage = run.usage + response.usage
        message = response.message
        for call in message.tool_calls:
            if call.id in run.call_ids:
                raise ModelError(f"model returned call id {call.id!r} twice in one run")
            run.call_ids.add(call.id)
        run.transcript.append(message)
        self._events.emit(
            ModelCalled(
                run.run_id, run.iterations, response.usage, message.content, message.tool_calls
            )
        )
        return message

    def _suspend(self, run: _Run, pending: tuple[PendingCall, ...]) -> NoReturn:
        state = self._checkpoint(run, pending)
        self._events.emit(
            Suspended(run.run_id, state.turn_digest, pending, run.iterations, run.usage)
        )
        raise ApprovalRequired(state)

    def _checkpoint(self, run: _Run, pending: tuple[PendingCall, ...]) -> SuspendedRunState:
        """The run as of its latest turn, ``pending`` its calls: what a suspension
        stores, and what a write-ahead stores before any of them acts."""
        run.sequence += 1
        return SuspendedRunState(
            run_id=run.run_id,
            agent_name=run.agent.name,
            agent_fingerprint=run.agent.fingerprint(),
            tool_names=run.tool_names,
            transcript=tuple(run.transcript),
            pending_calls=pending,
            iterations=run.iterations,
            usage=run.usage,
            max_iterations=run.max_iterations,
            token_budget=run.token_budget,
            trace=tuple(run.trace),
            turn_digest=turn_digest(run.run_id, run.sequence, pending),
            sequence=run.sequence,
        )

    def _settle(
        self, run: _Run, call: PendingCall, decision: CallDecision, source: DecisionSource
    ) -> ToolResultMessage:
        match settlement(run.agent, run.tool_names, call, decision, source):
            case Runs(tool=tool, arguments=arguments):
                return self._execute(run, call.id, tool, arguments)
            case Refused(told=told):
                return self._record_failure(run, call, told)
            case Denied(told=told):
                return ToolResultMessage(call.id, call.name, told, True)
            case other:
                assert_never(other)

    def _execute(
        self, run: _Run, call_id: str, tool: Tool, arguments: JsonObject
    ) -> ToolResultMessage:
        call = PendingCall(call_id, tool.name, arguments, tool.effect.value)
        try:
            validated = tool.validate(arguments)
        except ToolArgumentsError as exc:
            return self._record_failure(run, call, f"Error: {exc}")
        context = ToolContext(run.run_id, call_id, run.agent.name, tool.name)
        started = self._clock()
        outcome = self._executor(ToolInvocation(tool, validated, context))
        elapsed_ms = (self._clock() - started) * 1000
        return self._record(run, call, outcome, elapsed_ms)

    def _record_failure(self, run: _Run, call: PendingCall, message: str) -> ToolResultMessage:
        return self._record(run, call, ToolOutcome(message, is_error=True), 0.0)

    def _record(
        self, run: _Run, call: PendingCall, outcome: ToolOutcome, elapsed_ms: float
    ) -> ToolResultMessage:
        status: Outcome = "failed" if outcome.is_error else "succeeded"
        run.trace.append(TraceEntry(call.id, call.name, status, elapsed_ms))
        self._events.emit(
            ToolExecuted(
                run.run_id, call.id, call.name, call.arguments, status, outcome.content, elapsed_ms
            )
        )
        return ToolResultMessage(call.id, call.name, outcome.content, outcome.is_error)

    def _emit_decision(
        self,
        run: _Run,
        *,
        digest: str,
        call: PendingCall,
        decision: CallDecision,
        source: DecisionSource,
        approver: str | None,
    ) -> None:
        self._events.emit(
            DecisionApplied(
                run.run_id,
                digest,
                call.id,
                call.name,
                decision.kind,
                source,
                reason=decision.reason if isinstance(decision, Deny) else None,
                arguments=decision.arguments if isinstance(decision, Edit) else None,
                approver=approver,
                rule=call.policy.rule if call.policy else None,
                policy_sha256=call.policy.sha256 if call.policy else None,
            )
        )

    def _finish(self, run: _Run, termination: Termination) -> LoopResult:
        last = next((m for m in reversed(run.transcript) if isinstance(m, AssistantMessage)), None)
        output = last.content if last is not None else None
        self._events.emit(Finished(run.run_id, termination, output, run.iterations, run.usage))
        return LoopResult(
            run.run_id,
            output,
            termination,
            run.iterations,
            run.usage,
            tuple(run.trace),
            tuple(run.transcript),
        )


def _not_executed(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(
        call.id,
        call.name,
        f'Error: tool "{call.name}" was not executed: the run reached its limit.',
        is_error=True,
    )
