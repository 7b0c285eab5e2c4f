"""The drift check in front of every MCP call, and the fingerprints a suspended turn's
MCP calls are reviewed under.

A call runs only while its server lists its tool with the fingerprint it was reviewed
against: the one recorded when its turn was suspended (``review``), else the tool's
pin. Otherwise nothing is sent, the model reads ``drifted(name)`` and the run's
events record the drift (``mcp_drift``). A call the ledger knows already (it started
before a worker was lost) is the ledger's to answer, drifted or not."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import JsonValue

from airlock.loop import Agent, SuspendedRunState, ToolExecutor, ToolInvocation, ToolOutcome
from airlock.persistence.store import RunStore
from airlock.workers.mcp.catalog import KeepsContent, upstream_of

Note = Callable[[str, dict[str, JsonValue]], None]


def drifted(name: str) -> str:
    return f'Error: tool "{name}" changed upstream since it was pinned; not executed.'


class McpGuard:
    """Wraps the segment's executor (the ledger's)."""

    def __init__(self, inner: ToolExecutor, store: RunStore, note: Note) -> None:
        self._inner = inner
        self._store = store
        self._note = note

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        upstream = upstream_of(invocation.tool)
        ctx = invocation.context
        if upstream is None or self._store.ledger.recorded_call(ctx.run_id, ctx.call_id):
            return self._inner(invocation)
        from airlock.workers.mcp import runtime  # noqa: PLC0415 - the SDK, for MCP tools only

        server, definition = upstream
        expected = self._store.mcp.reviewed(ctx.run_id, ctx.call_id)
        pinned = expected is None
        if expected is None:
            pin = self._store.mcp.pin(server.name, definition.name)
            expected = pin.fingerprint if pin is not None else None
        try:
            found = runtime.live_fingerprint(server, definition.name)
        except runtime.McpCallError as exc:
            return ToolOutcome(f'Error: tool "{ctx.tool}" was not executed: {exc}', True)
        if found is not None and found == expected:
            outcome = self._inner(invocation)
            tool = invocation.tool
            content = tool.take_content(ctx) if isinstance(tool, KeepsContent) else []
            if content:
                self._note(
                    "mcp_content", {"call_id": ctx.call_id, "name": ctx.tool, "content": content}
                )
            return outcome
        self._note(
            "mcp_drift",
            {
                "call_id": ctx.call_id,
                "name": ctx.tool,
                "against": "pin" if pinned else "review",
                "expected": expected,
                "found": found,
            },
        )
        return ToolOutcome(drifted(ctx.tool), is_error=True)


def review(store: RunStore, agent: Agent, state: SuspendedRunState) -> None:
    """Record, for each MCP call of the suspended turn that waits for a person, the
    fingerprint of its tool's pin: what the approver reviews."""
    reviews: dict[str, tuple[str, str]] = {}
    for call in state.pending_calls:
        upstream = upstream_of(agent.tool(call.name))
        if call.requires_approval and upstream is not None:
            server, definition = upstream
            pin = store.mcp.pin(server.name, definition.name)
            reviews[call.id] = (call.name, pin.fingerprint if pin else definition.fingerprint())
    store.mcp.review(state.run_id, reviews)
