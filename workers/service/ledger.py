"""The tool executor that makes an approved call effectively-once."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

from pydantic import JsonValue

from airlock.loop import AirlockError, Effect, RequiresApproval, ToolInvocation, ToolOutcome
from airlock.persistence.domain import CallRecord, CallStatus, LedgerEntry
from airlock.persistence.store import Clock, RunStore, utcnow


class StartCall(Protocol):
    def __call__(
        self, call_id: str, tool: str, effect: str, arguments: dict[str, JsonValue]
    ) -> tuple[LedgerEntry, bool]:
        """Record a call that acts as started: (the ledger's entry, whether it is new)."""


class InDoubtCallError(AirlockError):
    """A call started but never recorded a result, and its tool is not safe to repeat."""


def is_read(invocation: ToolInvocation) -> bool:
    """A read-only tool that nothing marks for approval."""
    tool = invocation.tool
    return tool.effect is Effect.READ and not isinstance(tool, RequiresApproval)


def safe_to_repeat(invocation: ToolInvocation) -> bool:
    """A call found in doubt may run again: it only reads, or its write is idempotent."""
    return is_read(invocation) or invocation.tool.effect is Effect.IDEMPOTENT_WRITE


class LedgerExecutor:
    """Runs each call through the ``tool_calls`` ledger.

    A call with a recorded result is not run again: the result is replayed. A
    call found ``started`` without a result is in doubt (its worker died in
    between): it is run again, with the same idempotency key, only when its
    tool is read-only or an idempotent write; otherwise the run fails.
    """

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        start: StartCall | None = None,
        *,
        record: Callable[[CallRecord], None] | None = None,
        ledger: bool = True,
        clock: Clock = utcnow,
        owner: str | None = None,
    ) -> None:
        """``start``: records a call that acts as started (by default the ledger's
        ``start_call`` under ``owner``; a segment's event sink writes its pending events
        with it). ``record``: takes a read's ledger record, to be written later (by
        default it is written at once). ``ledger``: False when the run's ledger was empty
        as the segment began, so no read of it can have a recorded result to look up.
        ``owner``: the segment's lease, under which alone a call that acts is started."""
        self._store = store
        self._run_id = run_id
        self._start = start or functools.partial(store.ledger.start_call, run_id, owner=owner)
        self._record = record
        self._ledger = ledger
        self._clock = clock
        self.unrecorded: str | None = None
        """A call that acted and whose result is not recorded yet (only this executor
        knows it): were the segment to stop now, that call would be in doubt."""

    def __call__(self, invocation: ToolInvocation) -> ToolOutcome:
        if is_read(invocation):
            return self._read(invocation)
        call_id = invocation.context.call_id
        entry, fresh = self._start(
            call_id, invocation.tool.name, invocation.tool.effect.value, invocation.arguments
        )
        if not fresh:
            if entry.status is not CallStatus.STARTED:
                return ToolOutcome(entry.result or "", entry.is_error)
            if not safe_to_repeat(invocation):
                raise InDoubtCallError(
                    f'call {call_id} of tool "{entry.tool}" started but its outcome was never '
                    f"recorded (the worker was lost mid-call); the tool is a "
                    f"{entry.effect} tool, so it is not run again. Check the target system "
                    f"for idempotency key {invocation.context.idempotency_key} and finish the "
                    f"run by hand."
                )
            self._store.ledger.restart_call(self._run_id, call_id)
        self.unrecorded = call_id
        outcome = invocation.invoke()
        self._store.ledger.finish_call(
            self._run_id, call_id, outcome.content, is_error=outcome.is_error
        )
        self.unrecorded = None
        return outcome

    def _read(self, invocation: ToolInvocation) -> ToolOutcome:
        """A read changes nothing, so it needs no ``started`` record: were its worker
        lost mid-call, it would be run again anyway. Only its result is recorded, for
        a redelivered segment to replay."""
        call_id = invocation.context.call_id
        entry = self._store.ledger.recorded_call(self._run_id, call_id) if self._ledger else None
        if entry is not None:  # a read's record always has its result
            return ToolOutcome(entry.result or "", entry.is_error)
        started = self._clock()
        outcome = invocation.invoke()
        call = CallRecord(
            call_id=call_id,
            tool=invocation.tool.name,
            effect=invocation.tool.effect.value,
            arguments=invocation.arguments,
            result=outcome.content,
            is_error=outcome.is_error,
            started_at=started,
            finished_at=self._clock(),
        )
        if self._record is not None:
            self._record(call)
        else:
            self._store.ledger.record_calls(self._run_id, [call])
        return outcome
