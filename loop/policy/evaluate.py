"""Judging one call: deny, then ask, then allow, first match wins; nothing matched, an
error, a missing or mistyped argument, a text too long for a regex, a relative path
against a path prefix: ``ask`` (fail closed). An agent's section can only narrow what
the global rules decide."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import JsonValue

from airlock.loop.policy.bounds import matched_text
from airlock.loop.policy.paths import MissingArgumentError, declared_types, fits, json_type, lookup
from airlock.loop.policy.prefix import has_prefix
from airlock.loop.policy.rules import NUMERIC, Policy, Predicate, Rule, in_order
from airlock.loop.policy.verdicts import NO_RULE, Judgement, strictest


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What a rule may look at: the run (agent, requester, metadata) and the call."""

    agent: str
    tool: str
    arguments: Mapping[str, JsonValue]
    effect: str | None = None
    requester: str | None = None
    metadata: Mapping[str, JsonValue] = field(default_factory=dict)
    schema: Mapping[str, JsonValue] = field(default_factory=dict)
    """The tool's JSON schema for its arguments: the types values are judged by."""


_ORDER: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class _Unjudgeable(Exception):  # noqa: N818 - an outcome, caught below
    """A condition could not be decided (a missing or mistyped argument)."""


Outcome = Literal["matched", "skipped", "error"]


@dataclass(frozen=True, slots=True)
class Step:
    """How one rule fared: matched, skipped (and why) or could not be decided."""

    rule: Rule
    outcome: Outcome
    why: str


def judge(policy: Policy, facts: CallFacts) -> Judgement:
    """The verdict on one call: the global rules', made stricter by the agent's section."""
    return decide(policy, facts)[0]


def decide(policy: Policy, facts: CallFacts) -> tuple[Judgement, list[Step]]:
    """The verdict, and every rule tried on the way to it (``airlock policy explain``)."""
    overall, steps = _layer(policy, in_order(policy.rules), facts)
    section = policy.section(facts.agent)
    if section:
        narrowed, more = _layer(policy, in_order(section), facts)
        steps.extend(more)
        if more and more[-1].outcome != "skipped":
            overall = strictest(overall, narrowed)
    return overall, steps


def _layer(
    policy: Policy, rules: tuple[Rule, ...], facts: CallFacts
) -> tuple[Judgement, list[Step]]:
    steps: list[Step] = []
    for rule in rules:
        try:
            why = skipped(rule, facts)
        except _Unjudgeable as exc:
            steps.append(Step(rule, "error", str(exc)))
            return _closed(policy, rule.name, f'rule "{rule.name}": {exc}'), steps
        except Exception as exc:  # a bug must not let a call through: fail closed
            steps.append(Step(rule, "error", repr(exc)))
            return _closed(policy, rule.name, f'rule "{rule.name}" failed: {exc!r}'), steps
        if why is None:
            steps.append(Step(rule, "matched", "every condition holds"))
            return _verdict(policy, rule), steps
        steps.append(Step(rule, "skipped", why))
    return _closed(policy, NO_RULE, None), steps


def _closed(policy: Policy, rule: str, error: str | None) -> Judgement:
    return Judgement("ask", rule, policy.sha256, error=error)


def _verdict(policy: Policy, rule: Rule) -> Judgement:
    return Judgement(
        verdict=rule.verdict,
        rule=rule.name,
        sha256=policy.sha256,
        reason=rule.reason,
        approvers=(rule.approvers,) if rule.approvers else (),
        quorum=rule.quorum,
        expires_in=rule.expires_in,
        default=rule.default,
        edits=rule.edits,
    )


def skipped(rule: Rule, facts: CallFacts) -> str | None:
    """Why the rule does not match the call (None: it matches). Raises ``_Unjudgeable``."""
    if rule.agents is not None and not any(fnmatchcase(facts.agent, a) for a in rule.agents):
        return f"agent {facts.agent!r} is not {_listed(rule.agents)}"
    if not any(fnmatchcase(facts.tool, t) for t in rule.tools):
        return f"tool {facts.tool!r} is not {_listed(rule.tools)}"
    if rule.effects is not None and facts.effect not in rule.effects:
        return f"effect {facts.effect!r} is not {_listed(rule.effects)}"
    if rule.requesters is not None and facts.requester not in rule.requesters:
        return f"requester {facts.requester!r} is not {_listed(rule.requesters)}"
    for key, expected in rule.metadata:
        if key not in facts.metadata or not same(facts.metadata[key], expected):
            return f"metadata {key} is not {expected!r}"
    for predicate in rule.when:
        if not holds(predicate, facts):
            return f"not {predicate.describe()}"
    return None


def _listed(values: tuple[str, ...]) -> str:
    return " or ".join(repr(v) for v in values)


def holds(predicate: Predicate, facts: CallFacts) -> bool:
    """Whether the condition holds of the call's arguments, each value judged by the
    JSON type the tool's schema declares. Raises ``_Unjudgeable``."""
    try:
        value = lookup(facts.arguments, predicate.parts)
    except MissingArgumentError as exc:
        raise _Unjudgeable(f"argument {predicate.path} is missing") from exc
    declared = declared_types(facts.schema, predicate.parts)
    if declared and not fits(value, declared):
        raise _Unjudgeable(
            f"argument {predicate.path} is a {json_type(value)}, "
            f"but the tool declares {' or '.join(sorted(declared))}"
        )
    return _compare(predicate, value)


def _compare(predicate: Predicate, value: JsonValue) -> bool:
    op, expected = predicate.op, predicate.value
    if op in NUMERIC:
        if json_type(value) not in ("integer", "number"):
            raise _Unjudgeable(f"argument {predicate.path} is a {json_type(value)}, not a number")
        assert isinstance(value, int | float) and isinstance(expected, int | float)
        return _ORDER[op](value, expected)
    if op in ("prefix", "regex"):
        return _text(predicate, value)
    if json_type(value) == "non-finite number":
        raise _Unjudgeable(f"argument {predicate.path} is not a finite number")
    if op == "in":
        return isinstance(expected, list) and any(same(value, e) for e in expected)
    return same(value, expected) == (op == "==")


def _text(predicate: Predicate, value: JsonValue) -> bool:
    """``prefix`` (paths normalised: ``airlock.loop.policy.prefix``) and ``regex`` (on the
    engine given, the text bounded: ``airlock.loop.policy.bounds``) on a string."""
    if not isinstance(value, str):
        raise _Unjudgeable(f"argument {predicate.path} is a {json_type(value)}, not a string")
    try:
        if predicate.op == "prefix":
            return isinstance(predicate.value, str) and has_prefix(value, predicate.value)
        assert predicate.pattern is not None
        return predicate.pattern.search(matched_text(value))
    except ValueError as exc:
        raise _Unjudgeable(f"argument {predicate.path} {exc}") from exc


def same(left: JsonValue, right: JsonValue) -> bool:
    """JSON equality by type: ``true`` is not 1, ``"100"`` is not 100, 100 is 100.0."""
    kinds = {json_type(left), json_type(right)}
    if kinds <= {"integer", "number"}:
        return left == right
    if len(kinds) != 1:
        return False
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    return left == right
