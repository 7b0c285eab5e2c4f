"""A run's story from its audit events, as the run page tells it: a timeline in plain
words (who decided, and an edit's changes against the model's arguments), and the
transcript of a run that no longer waits (its checkpoint is gone; its events stay)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airlock.loop.gate import denial
from airlock.workers.http.inbox.present import line
from airlock.workers.service.views import clip

KINDS = {
    "request": "started",
    "llm": "model",
    "tool": "tool ran",
    "suspended": "waits",
    "decision": "decision",
    "approval": "approval",
    "resumed": "resumed",
    "completed": "finished",
    "failed": "failed",
    "retry": "retry",
    "cancelled": "cancelled",
    "expired": "expired",
}
DONE = {"approve": "approved", "deny": "denied", "edit": "approved with edits"}


@dataclass
class Entry:
    seq: int
    time: str
    kind: str
    what: str
    who: str | None = None
    auth: Mapping[str, Any] | None = None
    changes: list[tuple[str, str, str]] = field(default_factory=list)
    """An edit's changes: (argument, the model's value, the approver's)."""


@dataclass
class Story:
    """Read the events in order: a decision's edits are told against the arguments of
    the turn it decided (the last ``suspended`` event before it)."""

    asked: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The calls of the last turn that waited, by id."""
    numbers: dict[str, int] = field(default_factory=dict)

    def entry(self, event: Mapping[str, Any]) -> Entry:
        kind = str(event["kind"])
        payload = event["payload"] if isinstance(event["payload"], dict) else {}
        who = payload.get("principal") or payload.get("approver") or payload.get("by")
        auth = payload.get("auth") if isinstance(payload.get("auth"), dict) else None
        time = str(event.get("created_at") or "")[11:19]
        entry = Entry(int(event["seq"]), time, KINDS.get(kind, kind), "", who, auth)
        entry.what = self.what(kind, payload, entry)
        return entry

    def what(self, kind: str, payload: dict[str, Any], entry: Entry) -> str:
        match kind:
            case "request":
                return f"input: “{clip(str(payload.get('input', '')), 120)}”"
            case "llm":
                return _model(payload)
            case "tool":
                result = clip(str(payload.get("result", "")), 80)
                return f"{self.call(payload)} {payload.get('outcome')}: {result}"
            case "suspended":
                self.remember(payload.get("calls") or [])
                asked = [self.call(c, "id") for c in self.asked.values() if c.get("preset") is None]
                return "waits for a decision on " + (", ".join(asked) or "no call")
            case "decision" if "call_id" in payload:
                return self.applied(payload)
            case "decision" | "approval":
                return self.decided(kind, payload, entry)
            case "resumed":
                return f"the run goes on (model calls so far: {payload.get('iterations')})"
            case "retry" if "error" in payload:
                return _retry(payload)
            case "failed":
                return clip(str(payload.get("error", "")), 200)
            case "completed":
                done = str(payload.get("termination", "")).replace("_", " ")
                return f"{done}: “{clip(str(payload.get('output') or ''), 120)}”"
            case _:
                return _plain(payload)

    def remember(self, calls: list[Any]) -> None:
        found = [c for c in calls if isinstance(c, dict)]
        self.asked = {str(c.get("id")): c for c in found}
        self.numbers = {str(c.get("id")): n for n, c in enumerate(found, start=1)}

    def call(self, payload: Mapping[str, Any], key: str = "call_id") -> str:
        """A call in plain words: its tool and its place in the turn."""
        call_id = str(payload.get(key))
        number = self.numbers.get(call_id)
        return f"{payload.get('name')} (call {number})" if number else f"{payload.get('name')}"

    def applied(self, payload: dict[str, Any]) -> str:
        """The loop's record of how one call was settled."""
        verb = DONE.get(str(payload.get("decision")), str(payload.get("decision")))
        by = {"policy": "by the approval policy", "operator": ""}.get(
            str(payload.get("source")), "(no approval needed)"
        )
        why = f": {payload['reason']}" if payload.get("reason") else ""
        return " ".join(p for p in (f"{self.call(payload)} {verb}", by) if p) + why

    def decided(self, kind: str, payload: dict[str, Any], entry: Entry) -> str:
        """A person's decision (or approval toward a quorum), with its edits."""
        if payload.get("withdrawn"):
            return f"{entry.who} withdrew their approval"
        verb = DONE.get(str(payload.get("decision")), "decided")
        if kind == "approval":
            verb = "approval"
        if "quorum" in payload:
            verb += f" ({len(payload.get('approved_by') or [])} of {payload['quorum']} needed)"
        parts = [f"the whole turn {verb}" if kind == "decision" else verb]
        for call_id, own in sorted((payload.get("calls") or {}).items()):
            if not isinstance(own, dict):
                continue
            name = self.call({"call_id": call_id, "name": self.asked.get(call_id, {}).get("name")})
            parts.append(f"{name}: {DONE.get(str(own.get('decision')), own.get('decision'))}")
            if isinstance(own.get("arguments"), dict):
                entry.changes += self.changes(call_id, own["arguments"])
        why = f" — reason: {payload['reason']}" if payload.get("reason") else ""
        return "; ".join(parts) + why

    def changes(self, call_id: str, arguments: Mapping[str, Any]) -> list[tuple[str, str, str]]:
        was = self.asked.get(call_id, {}).get("arguments") or {}
        keys = list(dict.fromkeys([*was, *arguments]))
        return [
            (k, _shown(was.get(k)), _shown(arguments.get(k)))
            for k in keys
            if was.get(k) != arguments.get(k)
        ]


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    return clip(value if isinstance(value, str) else json.dumps(value), 80)


def _model(payload: Mapping[str, Any]) -> str:
    calls = [c for c in payload.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        return f"model call {payload.get('iteration')}: asks to run " + ", ".join(
            f"{c.get('name')}({line(c.get('arguments') or {}, 3, 30)})" for c in calls
        )
    answer = clip(str(payload.get("content") or ""), 120)
    return f"model call {payload.get('iteration')} answers: “{answer}”"


def _retry(payload: Mapping[str, Any]) -> str:
    delay = payload.get("delay")
    later = f", tried again in {delay:.0f} s" if isinstance(delay, int | float) else ""
    return f"attempt {payload.get('attempt')} failed{later}: {clip(str(payload['error']), 160)}"


def _plain(payload: Mapping[str, Any]) -> str:
    """An event the page has no words for: its fields, each cut at a word."""
    hidden = ("auth", "principal", "by", "run_id")
    shown = {k.replace("_", " "): _words(v) for k, v in payload.items() if k not in hidden}
    return line(shown, 6, 60) or "—"


def _words(value: Any) -> Any:
    """A list as the words it holds ("none" when empty), not as JSON."""
    if isinstance(value, list):
        return ", ".join(str(_words(v)) for v in value) or "none"
    return value


def timeline(events: list[dict[str, Any]]) -> list[Entry]:
    story = Story()
    return [story.entry(e) for e in events]


def transcript(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation the events record: the input, each model call, each call's
    result, and what the model was told of each call a decision denied."""
    messages: list[dict[str, Any]] = []
    asked: list[dict[str, Any]] = []
    for event in events:
        kind, payload = event["kind"], event["payload"]
        if not isinstance(payload, dict):
            continue
        if kind == "request":
            messages.append(_message("user", payload.get("input")))
        elif kind == "llm":
            calls = [c for c in payload.get("tool_calls") or [] if isinstance(c, dict)]
            messages.append(_message("assistant", payload.get("content"), calls))
        elif kind == "tool":
            failed = payload.get("outcome") == "failed"
            name = payload.get("name")
            messages.append(_message("tool", payload.get("result"), name=name, error=failed))
        elif kind == "suspended":
            asked = [c for c in payload.get("calls") or [] if isinstance(c, dict)]
        elif kind == "decision" and "principal" in payload:
            messages += [
                _message("tool", told, name=n, error=True) for n, told in _denied(asked, payload)
            ]
    return messages


def _denied(asked: list[dict[str, Any]], decision: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The calls of a turn a person's decision denied (as ``to_loop_decisions`` reads
    it: a call's own choice, else the whole turn's; a policy's verdict stands), each
    with what the model is told."""
    calls = decision.get("calls")
    own: Mapping[str, Any] = calls if isinstance(calls, dict) else {}
    denied: list[tuple[str, str]] = []
    for call in asked:
        name, chosen = str(call.get("name")), own.get(str(call.get("id")))
        if call.get("preset_source") == "policy":
            continue  # the loop records the policy's own verdicts
        if isinstance(chosen, dict):
            if chosen.get("decision") == "deny":
                denied.append((name, denial(name, "operator", str(chosen.get("reason") or ""))))
        elif decision.get("decision") == "deny":
            denied.append((name, denial(name, "operator", str(decision.get("reason") or ""))))
    return denied


def _message(
    role: str,
    content: Any,
    calls: list[dict[str, Any]] | None = None,
    *,
    name: Any = None,
    error: bool = False,
) -> dict[str, Any]:
    return {
        "role": role,
        "content": content,
        "calls": [
            {"id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments") or {}}
            for c in calls or []
        ],
        "name": name,
        "is_error": error,
    }
