"""A parsed policy file: rules, their matchers and typed argument predicates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import JsonValue

from airlock.loop.policy.bounds import Regex
from airlock.loop.policy.verdicts import ExpiryDefault, Verdict

Op = Literal["==", "!=", "<", "<=", ">", ">=", "in", "prefix", "regex"]
OPS: tuple[Op, ...] = ("==", "!=", "<", "<=", ">", ">=", "in", "prefix", "regex")
NUMERIC: frozenset[str] = frozenset({"<", "<=", ">", ">="})
EFFECTS = ("read", "idempotent_write", "write")

PathPart = str | int


@dataclass(frozen=True, slots=True)
class Predicate:
    """``path op value`` on the call's arguments, e.g. ``amount > 100``."""

    path: str
    parts: tuple[PathPart, ...]
    op: Op
    value: JsonValue
    pattern: Regex | None = field(default=None, compare=False)
    """A ``regex`` condition's pattern, compiled by a linear-time engine."""

    def describe(self) -> str:
        return f"{self.path} {self.op} {self.value!r}"


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule; a ``None`` matcher matches anything."""

    name: str
    line: int
    layer: str
    """``global``, or the agent whose section holds it."""
    verdict: Verdict
    agents: tuple[str, ...] | None = None
    tools: tuple[str, ...] = ("*",)
    effects: tuple[str, ...] | None = None
    requesters: tuple[str, ...] | None = None
    metadata: tuple[tuple[str, JsonValue], ...] = ()
    when: tuple[Predicate, ...] = ()
    reason: str = ""
    approvers: tuple[str, ...] = ()
    quorum: int = 1
    expires_in: float | None = None
    default: ExpiryDefault | None = None
    edits: bool = True


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy file: its global rules, each agent's section, and its sha256."""

    sha256: str
    rules: tuple[Rule, ...]
    sections: tuple[tuple[str, tuple[Rule, ...]], ...] = ()
    source: str = ""

    def section(self, agent: str) -> tuple[Rule, ...]:
        return next((rules for name, rules in self.sections if name == agent), ())

    def all_rules(self) -> tuple[Rule, ...]:
        return self.rules + tuple(r for _, rules in self.sections for r in rules)


def in_order(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """The order rules are tried in: deny, then ask, then allow; file order within each."""
    return tuple(r for v in ("deny", "ask", "allow") for r in rules if r.verdict == v)
