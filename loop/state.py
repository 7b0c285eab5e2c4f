"""The suspended run state: everything needed to continue a run later, as JSON.

Schema versions (every released version stays readable; add one line per version):
  1 — initial: transcript, pending calls with presets, counters, limits, trace, digest.
  2 — ``sequence`` (the checkpoint's number within the run); the digest binds the run id
      and it. A v1 state reads with ``sequence`` None and keeps its calls-only digest.
  3 — ``pending_calls[*].policy``: the policy file's judgement of the call (verdict, rule,
      the file's sha256, approvers, quorum, expiry), made once at suspension. A v2
      state reads with ``policy`` None on every call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import JsonValue, TypeAdapter, ValidationError

from airlock.loop.canonical import sha256_hex
from airlock.loop.decisions import Approve, Deny
from airlock.loop.errors import StateError, StateVersionError
from airlock.loop.messages import AssistantMessage, JsonObject, Message, Usage
from airlock.loop.policy.verdicts import Judgement
from airlock.loop.results import TraceEntry

SCHEMA_VERSION = 3

PresetSource = Literal["read_only", "policy", "unknown_tool", "invalid_arguments"]


# Upgrades a raw envelope of version N to version N + 1.
def _v1_to_v2(raw: dict[str, JsonValue]) -> dict[str, JsonValue]:
    return raw | {"sequence": None}


def _v2_to_v3(raw: dict[str, JsonValue]) -> dict[str, JsonValue]:
    return raw  # ``policy`` defaults to None: no file judged the calls


_MIGRATIONS: dict[int, Callable[[dict[str, JsonValue]], dict[str, JsonValue]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
}


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call of the suspended turn.

    ``preset`` is the decision that applies when the operator names no other:
    read-only calls run, policy verdicts stand. A call with no preset needs a
    person's decision.
    """

    id: str
    name: str
    arguments: JsonObject
    effect: str | None
    preset: Approve | Deny | None = None
    preset_source: PresetSource | None = None
    error: str | None = None
    policy: Judgement | None = None
    """The policy file's judgement, when one judged the call (never changed by a reload)."""

    @property
    def requires_approval(self) -> bool:
        return self.preset is None


def turn_digest(run_id: str, sequence: int | None, calls: tuple[PendingCall, ...]) -> str:
    """sha256 of the canonical JSON of the run id, the checkpoint's sequence number within
    the run and the pending calls (ids, names, arguments): a decision quoting it can apply
    to no other run's turn, nor to another turn of this run. ``sequence`` None: a v1
    state, whose digest covered the calls alone."""
    listed: JsonValue = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
    if sequence is None:
        return sha256_hex(listed)
    return sha256_hex({"run_id": run_id, "sequence": sequence, "calls": listed})


@dataclass(frozen=True, slots=True)
class SuspendedRunState:
    run_id: str
    agent_name: str
    agent_fingerprint: str
    tool_names: tuple[str, ...]
    transcript: tuple[Message, ...]
    pending_calls: tuple[PendingCall, ...]
    iterations: int
    usage: Usage
    max_iterations: int
    token_budget: int | None
    trace: tuple[TraceEntry, ...]
    turn_digest: str
    sequence: int | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def awaits_decision(self) -> bool:
        """A suspension waits for a person; a write-ahead checkpoint (every call decided
        by a policy or its kind) only marks where a redone segment resumes."""
        return any(c.requires_approval for c in self.pending_calls)

    def to_json(self) -> str:
        try:
            return _ADAPTER.dump_json(self).decode()
        except ValueError:  # a lone surrogate, which UTF-8 cannot hold: escape it
            return json.dumps(_ADAPTER.dump_python(self, mode="json"))

    @classmethod
    def from_json(cls, blob: str | bytes) -> SuspendedRunState:
        try:
            raw = json.loads(blob)
        except ValueError as exc:
            raise StateError(f"suspended run state is not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise StateError("suspended run state must be a JSON object")
        try:
            state = _ADAPTER.validate_python(_upgrade(raw))
        except ValidationError as exc:
            raise StateError(f"suspended run state is malformed: {exc}") from exc
        state.verify()
        return state

    def verify(self) -> None:
        """Refuse a state whose digest or last turn do not match its pending calls."""
        if turn_digest(self.run_id, self.sequence, self.pending_calls) != self.turn_digest:
            raise StateError("suspended run state was tampered with: turn_digest does not match")
        last = self.transcript[-1] if self.transcript else None
        if not isinstance(last, AssistantMessage) or [
            (c.id, c.name, c.arguments) for c in last.tool_calls
        ] != [(c.id, c.name, c.arguments) for c in self.pending_calls]:
            raise StateError(
                "suspended run state was tampered with: pending calls do not match the last turn"
            )


def _upgrade(raw: dict[str, JsonValue]) -> dict[str, JsonValue]:
    version = raw.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StateError(f"suspended run state has no valid schema_version (got {version!r})")
    if version > SCHEMA_VERSION:
        raise StateVersionError(
            f"suspended run state has schema_version {version}, but this Airlock reads "
            f"versions up to {SCHEMA_VERSION}; upgrade Airlock to resume it"
        )
    while version < SCHEMA_VERSION:
        raw = _MIGRATIONS[version](raw)
        version += 1
        raw["schema_version"] = version
    return raw


_ADAPTER: TypeAdapter[SuspendedRunState] = TypeAdapter(SuspendedRunState)
