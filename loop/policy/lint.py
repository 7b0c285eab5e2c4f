"""``airlock policy check``'s warnings: a rule an earlier one shadows, a rule that can
never match, a ``prefix`` whose meaning could surprise its reader."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase

from airlock.loop.policy.prefix import surprise
from airlock.loop.policy.rules import Policy, Predicate, Rule, in_order


@dataclass(frozen=True, slots=True)
class LintWarning:
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f'line {self.line}: rule "{self.rule}" {self.message}'


def lint(policy: Policy) -> list[LintWarning]:
    warnings: list[LintWarning] = []
    layers = [policy.rules, *(rules for _, rules in policy.sections)]
    for rules in layers:
        tried: list[Rule] = []
        for rule in in_order(rules):
            never = never_matches(rule)
            if never:
                warnings.append(LintWarning(rule.line, rule.name, f"can never match: {never}"))
            earlier = next((e for e in tried if covers(e, rule)), None)
            if earlier is not None and not never:
                warnings.append(
                    LintWarning(
                        rule.line,
                        rule.name,
                        f'is shadowed by rule "{earlier.name}" (line {earlier.line}), '
                        f"tried before it and matching every call it matches",
                    )
                )
            tried.append(rule)
            warnings.extend(LintWarning(rule.line, rule.name, m) for m in surprises(rule))
    return sorted(warnings, key=lambda w: w.line)


def surprises(rule: Rule) -> list[str]:
    """Its ``prefix`` conditions whose meaning could surprise (``airlock.loop.policy.prefix``)."""
    found = []
    for p in rule.when:
        why = surprise(p.value) if p.op == "prefix" and isinstance(p.value, str) else None
        if why is not None:
            found.append(f"at {p.path}: {why}")
    return found


def covers(earlier: Rule, later: Rule) -> bool:
    """Whether every call ``later`` matches is matched by ``earlier`` (conservatively:
    only when each of its conditions is also one of the later rule's, or wider)."""
    return (
        _wider(earlier.agents, later.agents)
        and _globs_cover(earlier.tools, later.tools)
        and _wider(earlier.effects, later.effects)
        and _wider(earlier.requesters, later.requesters)
        and set(earlier.metadata) <= set(later.metadata)
        and all(p in later.when for p in earlier.when)
    )


def _wider(earlier: tuple[str, ...] | None, later: tuple[str, ...] | None) -> bool:
    if earlier is None:
        return True
    return later is not None and _globs_cover(earlier, later)


def _globs_cover(earlier: tuple[str, ...], later: tuple[str, ...]) -> bool:
    return all(any(g in (t, "*") or fnmatchcase(t, g) for g in earlier) for t in later)


def never_matches(rule: Rule) -> str | None:
    """Why no call can satisfy the rule's conditions together (None: some can)."""
    for predicate in rule.when:
        if predicate.op == "in" and predicate.value == []:
            return f"{predicate.path} in [] holds for no value"
    paths = {p.path for p in rule.when}
    for path in sorted(paths):
        low, high = _bounds([p for p in rule.when if p.path == path])
        if low[0] > high[0] or (low[0] == high[0] and (low[1] or high[1])):
            return f"no number is both {_side(low, '>')} and {_side(high, '<')} at {path}"
        equal = [p.value for p in rule.when if p.path == path and p.op == "=="]
        if len({repr(v) for v in equal}) > 1:
            return f"{path} cannot equal {equal[0]!r} and {equal[1]!r} at once"
    return None


def _bounds(predicates: list[Predicate]) -> tuple[tuple[float, bool], tuple[float, bool]]:
    """The tightest lower and upper bound (value, strict) the numeric conditions set."""
    low, high = (-math.inf, False), (math.inf, False)
    for p in predicates:
        if not isinstance(p.value, int | float) or isinstance(p.value, bool):
            continue
        value = float(p.value)
        if p.op in (">", ">=") and (value > low[0] or (value == low[0] and p.op == ">")):
            low = (value, p.op == ">")
        if p.op in ("<", "<=") and (value < high[0] or (value == high[0] and p.op == "<")):
            high = (value, p.op == "<")
    return low, high


def _side(bound: tuple[float, bool], op: str) -> str:
    return f"{op}{'' if bound[1] else '='} {bound[0]:g}"
