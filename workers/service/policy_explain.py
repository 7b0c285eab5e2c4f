"""``airlock policy explain``: which rule decided each gated call of a run, and why each
rule tried before it did not match. The calls come from the run's audit stream (its
``llm`` events), the verdict recorded at the time from its ``suspended`` and
``decision`` events; the explanation re-judges the call by the policy given."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from pydantic import JsonValue

from airlock.loop import requires_approval
from airlock.loop.errors import AirlockError
from airlock.loop.policy import CallFacts, Judgement, Policy, Step, decide
from airlock.persistence.domain import Run, RunEvent
from airlock.workers.service.registry import Registry
from airlock.workers.service.settings import settings


@dataclass(frozen=True)
class Explanation:
    call_id: str
    tool: str
    arguments: Mapping[str, JsonValue]
    recorded: Mapping[str, JsonValue] | None
    """The judgement recorded when the call was judged (None: none recorded)."""
    judged: Judgement
    """The policy's judgement now."""
    steps: list[Step]


def explain_run(
    run: Run, events: list[RunEvent], registry: Registry, policy: Policy, call: str | None
) -> list[Explanation]:
    """Each gated call of ``run`` (or only ``call``), judged by ``policy``, with what was
    recorded for it. Raises ``LookupError`` for a call id the run never made."""
    recorded = _recorded(events)
    agent = registry.get(run.agent) if run.agent in registry else None
    found: list[Explanation] = []
    for call_id, name, arguments in _calls(events):
        if call is not None and call_id != call:
            continue
        tool = agent.tool(name) if agent else None
        if call is None and (tool is None or not requires_approval(tool)):
            continue
        facts = CallFacts(
            agent=run.agent,
            tool=name,
            arguments=arguments,
            effect=tool.effect.value if tool else None,
            requester=run.requested_by,
            metadata=run.metadata,
            schema=tool.schema().parameters if tool else {},
        )
        judged, steps = decide(policy, facts)
        found.append(Explanation(call_id, name, arguments, recorded.get(call_id), judged, steps))
    if call is not None and not found:
        raise LookupError(f"run {run.id} made no call {call!r}")
    return found


def _calls(events: list[RunEvent]) -> list[tuple[str, str, dict[str, JsonValue]]]:
    calls = []
    for event in events:
        listed = event.payload.get("tool_calls") if event.kind == "llm" else None
        for c in listed if isinstance(listed, list) else []:
            if isinstance(c, dict) and isinstance(c.get("arguments"), dict):
                arguments = c["arguments"]
                assert isinstance(arguments, dict)
                calls.append((str(c.get("id")), str(c.get("name")), arguments))
    return calls


def _recorded(events: list[RunEvent]) -> dict[str, Mapping[str, JsonValue]]:
    """Per call id, the judgement the ``suspended`` (or a policy's ``decision``) event
    recorded."""
    found: dict[str, Mapping[str, JsonValue]] = {}
    for event in events:
        if event.kind == "suspended":
            for c in _list(event.payload.get("calls")):
                if isinstance(c, dict) and isinstance(c.get("policy"), dict):
                    policy = c["policy"]
                    assert isinstance(policy, dict)
                    found[str(c.get("id"))] = policy
        elif event.kind == "decision" and event.payload.get("rule"):
            found.setdefault(
                str(event.payload.get("call_id")),
                {"rule": event.payload["rule"], "sha256": event.payload.get("policy_sha256")},
            )
    return found


def _list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def schema_of(agent: str, tool: str) -> tuple[Mapping[str, JsonValue], str] | None:
    """A tool's JSON schema and effect, from the agents of ``AIRLOCK_AGENTS`` (None when
    they cannot be loaded here, or name no such agent or tool): ``policy test`` judges a
    case's arguments by the types its tool declares."""
    try:
        registry = _registry()
    except AirlockError:
        return None
    found = registry.get(agent).tool(tool) if agent in registry else None
    return (found.schema().parameters, found.effect.value) if found else None


@lru_cache(maxsize=1)
def _registry() -> Registry:
    return Registry.from_paths(settings().agents)
