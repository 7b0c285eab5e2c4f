"""The run view: what the API returns and what notifications carry. Never the raw state."""

from __future__ import annotations

from datetime import datetime

from pydantic import JsonValue

from loop import Approve, Deny, PendingCall, StateError
from persistence.domain import Run, RunEvent
from workers.service import Service


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def verdict(call: PendingCall) -> dict[str, JsonValue]:
    """What the approval policy said of a call: ``asks`` (a person decides),
    ``approved_by_policy`` or ``denied_by_policy`` (final, with the policy's reason), or
    why no person is asked (``read_only``, ``unknown_tool``, ``invalid_arguments``)."""
    match call.preset, call.preset_source:
        case None, _:
            return {"verdict": "asks", "policy_reason": None}
        case Approve(), "policy":
            return {"verdict": "approved_by_policy", "policy_reason": None}
        case Deny(reason=reason), "policy":
            return {"verdict": "denied_by_policy", "policy_reason": reason or None}
        case _, source:
            return {"verdict": source or "read_only", "policy_reason": None}


def run_view(service: Service, run: Run) -> dict[str, JsonValue]:
    pending: JsonValue = None
    try:
        state = service.pending(run)
    except StateError as exc:  # this run's alone: reported on it, every other reads on
        state = None
        pending = {
            "turn_digest": run.turn_digest,
            "calls": [],
            "error": f"the checkpoint cannot be read: {exc}",
            "suspended_at": iso(run.suspended_at),
            "expires_at": iso(run.expires_at),
        }
    if state is not None:
        pending = {
            "turn_digest": state.turn_digest,
            "calls": [
                {
                    "id": c.id,
                    "name": c.name,
                    "arguments": c.arguments,
                    "effect": c.effect,
                    "requires_approval": c.requires_approval,
                    **verdict(c),
                }
                for c in state.pending_calls
            ],
            "suspended_at": iso(run.suspended_at),
            "expires_at": iso(run.expires_at),
        }
    return {
        "id": run.id,
        "agent": run.agent,
        "status": run.status.value,
        "termination": run.termination,
        "iterations": run.iterations,
        "usage": {
            "prompt_tokens": run.usage.prompt_tokens,
            "completion_tokens": run.usage.completion_tokens,
        },
        "output": run.output,
        "error": run.unreadable or run.error,  # a sealed column this key cannot open
        "metadata": run.metadata,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "pending": pending,
    }


def event_view(event: RunEvent) -> dict[str, JsonValue]:
    return {
        "seq": event.seq,
        "kind": event.kind,
        "payload": event.payload,
        "created_at": iso(event.created_at),
    }
