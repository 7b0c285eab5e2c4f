"""The MCP gateway: any MCP client's ``tools/call`` of a declared server's tool, judged
by the policy with agent ``mcp`` and the caller's principal as requester.

``allow`` forwards the call (``runtime.call``); ``deny`` answers it with the reason;
``ask`` holds it in a run of the built-in agent ``mcp`` (``gateway_agent``), whose one
turn is exactly that call: the inbox, the webhooks, the CLI, quorum, grants and expiry
decide it as any run's, and the worker that runs the approved run makes the call
through the ledger (once, ``{run_id}:{call_id}`` in ``_meta``). An identical call of
the same principal attaches to the run while its result was not returned
(``store.gateway``). The doors (``airlock api``'s ``/mcp``, ``airlock gateway
--stdio``) wait for the run in their own way (``Waiter``) and call ``answer``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import JsonValue

from airlock.loop import (
    Agent,
    AirlockError,
    AssistantMessage,
    Deny,
    Effect,
    Message,
    ModelResponse,
    ToolArgumentsError,
    ToolCall,
    ToolResultMessage,
    ToolSchema,
    Usage,
    UserMessage,
)
from airlock.loop.canonical import sha256_hex
from airlock.loop.gate import classify
from airlock.persistence.domain import CallStatus, LedgerEntry, Run, RunStatus
from airlock.persistence.store import HeldCall, UnknownRunError
from airlock.workers.mcp import runtime
from airlock.workers.mcp.guard import drifted
from airlock.workers.mcp.tools import McpTool, mcp_tools
from airlock.workers.service import ConflictError, Service
from airlock.workers.service.decisions import refuse_unstorable
from airlock.workers.service.principals import Principal

AGENT = "mcp"
"""The built-in agent whose runs hold the gateway's calls."""
CALL_ID = "mcp_call"
"""The id of the one call of a gateway run (its idempotency key: ``{run_id}:mcp_call``)."""
DEFAULT_CALL_TIMEOUT = 30.0
"""An MCP server's call timeout when its declaration is gone."""
IN_FLIGHT_MARGIN = 10.0
"""Seconds, past a server's call timeout, a call of a run that ended may still record."""
RUN_META = "io.airlock/run"
STATUS_META = "io.airlock/status"
T = TypeVar("T")
Verdict = Literal["allow", "ask", "deny"]
Waiter = Callable[[str, float], Awaitable[None]]
"""Returns once the run is over, or after the seconds given (whichever is first)."""
InThread = Callable[[Callable[[], Any]], Awaitable[Any]]
Present = Callable[[], Awaitable[bool]]
"""Whether the client still waits for the answer (it did not hang up)."""


class UnknownToolError(AirlockError, LookupError):
    """No declared server offers a tool of this name (an MCP error, not a tool result)."""


class TaskNotFoundError(AirlockError, LookupError):
    """No held call of this id is the caller's (another principal's is not found either)."""


class WithdrawLaterError(AirlockError, RuntimeError):
    """The held call's run is asking for approval right now: it can be withdrawn once it
    waits."""


class GatewayModel:
    """The agent ``mcp``'s model: its first turn is the call its run's input names; its
    second, the call's answer, as ``{"isError": …, "text": …}`` (the run's output)."""

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        if not any(isinstance(m, AssistantMessage) for m in transcript):
            request = next(m for m in transcript if isinstance(m, UserMessage))
            asked = json.loads(request.content)
            call = ToolCall(CALL_ID, str(asked["tool"]), dict(asked["arguments"]))
            return ModelResponse(AssistantMessage(tool_calls=(call,)), Usage())
        answer = next(m for m in reversed(transcript) if isinstance(m, ToolResultMessage))
        output = json.dumps({"isError": answer.is_error, "text": answer.content})
        return ModelResponse(AssistantMessage(content=output), Usage())


def gateway_agent(servers: Sequence[str]) -> Agent:
    """The agent ``mcp``: every declared server's tools, one call per run."""
    tools = [t for name in servers for t in mcp_tools(name)]
    return Agent(name=AGENT, model=GatewayModel(), tools=tools, max_iterations=2)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the client's ``tools/call`` is answered: a tool result."""

    text: str
    is_error: bool
    meta: dict[str, JsonValue] = field(default_factory=dict)
    outcome: str = "forwarded"
    """For the metrics: ``forwarded`` (allowed), ``denied`` (by the policy), ``invalid``,
    ``decided`` (a held call's result: approved, denied or expired), ``pending``,
    ``drifted`` (an allowed call of a tool that changed upstream: not sent)."""
    sent: bool = True
    """False when a held call's run ended before its call was sent upstream."""


@dataclass(frozen=True, slots=True)
class Tasked:
    """A held call not over yet, for a client that follows it as a task; its run as read."""

    held: HeldCall
    run: Run


@dataclass(frozen=True, slots=True)
class Judged:
    verdict: Verdict
    reason: str = ""


def digest(principal: Principal, tool: str, arguments: Mapping[str, JsonValue]) -> str:
    """What makes two calls identical: the same principal, tool and arguments."""
    return sha256_hex({"principal": principal.key, "tool": tool, "arguments": dict(arguments)})


class Gateway:
    def __init__(
        self, service: Service, servers: Sequence[str], *, wait: float, inbox: str = ""
    ) -> None:
        self.service = service
        self.servers = tuple(servers)
        self.wait = wait
        self.inbox = inbox
        """Where a person decides (the inbox's address), said in a pending answer."""

    def tools(self) -> list[McpTool]:
        """The declared servers' tools, as pinned (a server away offers its pins)."""
        return [t for name in self.servers for t in mcp_tools(name) if isinstance(t, McpTool)]

    def tool(self, name: str) -> McpTool:
        for tool in self.tools():
            if tool.name == name:
                return tool
        raise UnknownToolError(f'unknown tool "{name}": no declared MCP server offers it')

    def judge(
        self, principal: Principal, tool: McpTool, arguments: Mapping[str, JsonValue]
    ) -> Judged:
        """The policy's verdict with agent ``mcp`` and the principal as requester; a
        ``deny`` rule refuses a read too (a read is otherwise forwarded)."""
        holder = self.service.policy
        policy = holder.for_run(principal.id, _metadata(principal, tool)) if holder else None
        if tool.effect is Effect.READ:
            facts = (
                policy.facts(AGENT, tool.name, arguments, tool.effect.value, {}) if policy else None
            )
            judged = policy.judge(facts) if policy and facts else None
            if judged is not None and judged.verdict == "deny":
                return Judged("deny", judged.reason or judged.line())
            return Judged("allow")
        agent = Agent(name=AGENT, model=GatewayModel(), tools=[tool], max_iterations=2)
        pending = classify(agent, ToolCall(CALL_ID, tool.name, dict(arguments)), policy)
        if isinstance(pending.preset, Deny):
            return Judged("deny", pending.preset.reason or "denied by policy")
        return Judged("allow" if pending.preset is not None else "ask")

    def forward(self, tool: McpTool, arguments: Mapping[str, JsonValue]) -> Answer:
        """An allowed call, made now (its key: ``gateway:<uuid>``), only while the
        server lists the tool as pinned (else nothing is sent: the drift guard's answer)."""
        try:
            if runtime.live_fingerprint(tool.server, tool.definition.name) != tool.fingerprint:
                return Answer(drifted(tool.name), True, outcome="drifted")
            outcome = runtime.call(
                tool.server, tool.definition.name, dict(arguments),
                idempotency_key=f"gateway:{uuid.uuid4()}",
                repeatable=tool.effect is not Effect.WRITE,
            )  # fmt: skip
        except runtime.McpCallError as exc:
            ran = " It may have run upstream." if exc.maybe_ran else " It did not run."
            return Answer(f"{exc}.{ran}", True)
        return Answer(outcome.text, outcome.is_error)

    def hold(
        self, principal: Principal, tool: McpTool, arguments: Mapping[str, JsonValue]
    ) -> HeldCall:
        """The run that holds this call: the open one of an identical call, or a new one."""
        store = self.service.store
        held = store.gateway.open(
            digest(principal, tool.name, arguments), principal.key, tool.server.name, tool.name
        )
        if held.run_id is not None:
            return held
        run, _ = self.service.start_run(
            AGENT,
            json.dumps({"tool": tool.name, "arguments": dict(arguments)}, sort_keys=True),
            idempotency_key=f"mcp-gateway:{held.id}",
            metadata=_metadata(principal, tool),
            requested_by=principal.id,
            caller=principal.key,
            built_in=True,
        )
        store.gateway.bind(held.id, run.id)
        return HeldCall(
            held.id, run.id, held.server, held.tool, held.principal, held.created, held.opened_at
        )

    def settled(self, held: HeldCall) -> Answer | None:
        """The held call's answer once its run is over (its result then marked returned:
        an identical call is a new call); None while it is not."""
        assert held.run_id is not None
        return self.settle(held, self.service.get_run(held.run_id))

    def settle(self, held: HeldCall, run: Run) -> Answer | None:
        """``settled``, on its run as just read."""
        if not run.status.terminal:
            return None
        done = self.answer_of(run, held)
        if done is not None:
            self.service.store.gateway.close(held.id)
        return done

    def answer_of(self, run: Run, held: HeldCall) -> Answer | None:
        """What a held call's run that is over answers: its output; or, when it was
        cancelled or failed, what the ledger says of its call (the upstream's result
        when the call was made before the run ended; that it may have been made when
        its outcome was never recorded; else that it was not). None while the call may
        still be in flight (``in_flight``): its outcome is awaited."""
        if run.status is RunStatus.COMPLETED:
            return result_of(run)
        entry = self.service.store.ledger.recorded_call(run.id, CALL_ID)
        if entry is not None and entry.status is CallStatus.STARTED and self.in_flight(run, held):
            return None
        return result_of(run, entry)

    def in_flight(self, run: Run, held: HeldCall) -> bool:
        """Whether a run that ended with its call started (an operator's cancel while the
        worker was making it) may still have a worker in the call, which records its
        outcome: until the server's call timeout, and a margin, after the run ended."""
        try:
            timeout = self.tool(held.tool).server.timeout
        except UnknownToolError:
            timeout = DEFAULT_CALL_TIMEOUT
        since = (self.service.clock() - run.updated_at).total_seconds()
        return since < timeout + IN_FLIGHT_MARGIN

    def owned(self, principal: Principal, task_id: str) -> HeldCall:
        """The held call ``task_id`` (a task of the Tasks extension) of ``principal``.
        Raises ``TaskNotFoundError``, also for another principal's call."""
        held = self.service.store.gateway.find(task_id)
        if held is None or held.principal != principal.key or held.run_id is None:
            raise TaskNotFoundError(f'task "{task_id}" not found')
        return held

    def task(self, principal: Principal, task_id: str) -> tuple[HeldCall, Run, Answer | None]:
        """The held call ``task_id`` of ``principal``, its run and, once the run is over,
        its answer (the result then marked returned, as ``settled``). Raises
        ``TaskNotFoundError``."""
        held = self.owned(principal, task_id)
        try:
            run = self.service.get_run(str(held.run_id))
        except UnknownRunError as exc:  # its run was purged (RETENTION_DAYS) meanwhile
            raise TaskNotFoundError(f'task "{task_id}" not found') from exc
        return held, run, self.settle(held, run)

    def withdraw(self, principal: Principal, task_id: str) -> bool:
        """The caller no longer wants its held call: its run is cancelled, as its
        requester, while no call of it was decided or began (checked by the cancelling
        statement), and an identical call is a new call from then on; True when it was,
        False when the call was decided (it goes on) or is over. Raises
        ``TaskNotFoundError``; ``WithdrawLaterError`` while the run is asking for approval
        (its first segment: in flight, or its worker lost until its lease expires)."""
        held = self.owned(principal, task_id)
        run_id = str(held.run_id)
        try:
            self.service.cancel(run_id, by=principal, undecided=True)
        except UnknownRunError:
            return False
        except ConflictError as exc:  # decided, being made or over: its answer stands
            run = self.service.get_run(run_id)
            if run.status is RunStatus.RUNNING and run.turn_digest is None:
                raise WithdrawLaterError(
                    f"run {run_id} is asking for approval right now; withdraw it again in a "
                    "moment (it can be withdrawn once it waits)"
                ) from exc
            return False
        self.service.store.gateway.close(held.id)
        return True

    def waiting(self, run_id: str) -> str:
        """Where a held call waits: for whom, and where it is decided."""
        where = f"in the inbox ({self.inbox}) or " if self.inbox else ""
        return (
            f"approval pending: run {run_id}; an approver (not its requester) decides it "
            f"{where}with `airlock approve {run_id}`"
        )

    def pending(self, run_id: str) -> Answer:
        text = f"{self.waiting(run_id)}; call again with the same arguments to get its result"
        meta: dict[str, JsonValue] = {RUN_META: run_id, STATUS_META: "waiting_for_approval"}
        return Answer(text, True, meta, "pending")


def result_of(run: Run, entry: LedgerEntry | None = None) -> Answer:
    """A held call's answer from its run that is over (``entry``: the ledger's record
    of its call, for a run that did not complete)."""
    meta: dict[str, JsonValue] = {RUN_META: run.id, STATUS_META: run.status.value}
    if run.status is RunStatus.COMPLETED and run.output:
        try:
            found = json.loads(run.output)
            return Answer(str(found["text"]), bool(found["isError"]), meta, "decided")
        except (ValueError, KeyError, TypeError):
            return Answer(run.output, False, meta, "decided")
    why = run.error or f"the run was {run.status.value}"
    if entry is not None and entry.status is not CallStatus.STARTED:
        return Answer(entry.result or "", entry.is_error, meta, "decided")
    if entry is not None:
        said = f"the call was sent upstream but its outcome was never recorded: {why}"
        return Answer(said, True, meta, "decided")
    return Answer(f"not executed: {why}", True, meta, "decided", sent=False)


def _metadata(principal: Principal, tool: McpTool) -> dict[str, JsonValue]:
    return {"mcp": {"server": tool.server.name, "tool": tool.name, "principal": principal.key}}


async def answer(
    gateway: Gateway,
    principal: Principal,
    name: str,
    arguments: Mapping[str, JsonValue],
    *,
    in_thread: InThread,
    wait_run: Waiter,
    present: Present | None = None,
    task: bool = False,
) -> Answer | Tasked:
    """A client's ``tools/call``, answered. Raises ``UnknownToolError``. A held call's
    result is marked returned only while its client is ``present`` (one that hung up
    while it waited gets it on its next identical call). With ``task`` (the client
    negotiated the Tasks extension) a held call not over yet is returned at once, with
    its run as read: the client follows it as a task (``Gateway.task``)."""
    tool: McpTool = await in_thread(lambda: gateway.tool(name))
    try:
        refuse_unstorable(dict(arguments), "arguments")
        tool.validate(arguments)
    except (ToolArgumentsError, ValueError) as exc:
        return Answer(f"Error: {exc}; not executed, no approval asked", True, outcome="invalid")
    judged: Judged = await in_thread(lambda: gateway.judge(principal, tool, arguments))
    if judged.verdict == "deny":
        return Answer(f"denied: {judged.reason}", True, outcome="denied")
    if judged.verdict == "allow":
        return await in_thread(lambda: gateway.forward(tool, arguments))  # type: ignore[no-any-return]
    held: HeldCall = await in_thread(lambda: gateway.hold(principal, tool, arguments))
    assert held.run_id is not None
    run: Run = await in_thread(lambda: gateway.service.get_run(str(held.run_id)))
    done: Answer | None = await in_thread(lambda: gateway.settle(held, run))
    if done is None and task:
        return Tasked(held, run)
    if done is None:
        await wait_run(held.run_id, gateway.wait)
        if present is not None and not await present():
            return gateway.pending(held.run_id)
        done = await in_thread(lambda: gateway.settled(held))
    return done or gateway.pending(held.run_id)
