"""Reading a policy file (TOML) into typed rules, refusing anything malformed with the
line and the reason."""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from dataclasses import dataclass
from typing import cast

from pydantic import JsonValue

from airlock.loop.durations import duration_seconds
from airlock.loop.errors import AirlockError
from airlock.loop.policy.bounds import MAX_GLOB_LENGTH, CompileRegex, Regex, compile_pattern
from airlock.loop.policy.locate import Locator
from airlock.loop.policy.paths import parse_path
from airlock.loop.policy.prefix import unnormalised
from airlock.loop.policy.rules import EFFECTS, NUMERIC, OPS, Op, Policy, Predicate, Rule
from airlock.loop.policy.verdicts import ExpiryDefault, Verdict

RULE_KEYS = frozenset(
    {"name", "agent", "tool", "effect", "requester", "metadata", "when", "verdict", "reason"}
    | {"approvers", "quorum", "expires_in", "default", "edits"}
)
ASK_KEYS = frozenset({"approvers", "quorum", "expires_in", "default", "edits"})


class PolicyError(AirlockError):
    """The policy file is malformed."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}" if line else reason)


def parse_policy(text: str, compile_regex: CompileRegex | None = None) -> Policy:
    """The policy ``text`` holds. Raises ``PolicyError`` naming the line and the reason.

    ``compile_regex``: the linear-time engine ``regex`` conditions run on (the workers
    give RE2); without one, a file with a ``regex`` condition is refused."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        line = int(found.group(1)) if found else max(1, len(text.splitlines()))
        raise PolicyError(line, str(exc)) from exc
    where = _Where(text, compile_regex)
    unknown = sorted(set(raw) - {"version", "rules", "agents"})
    if unknown:
        raise PolicyError(where.top_key(unknown[0]), f"unknown key {unknown[0]!r}")
    if raw.get("version", 1) != 1:
        raise PolicyError(where.top_key("version"), "version must be 1")
    names: set[str] = set()
    rules = _rules(raw.get("rules", []), "rules", "global", where, names)
    agents = raw.get("agents", {})
    if not isinstance(agents, dict):
        raise PolicyError(where.top_key("agents"), "agents must be a table of agent sections")
    sections: list[tuple[str, tuple[Rule, ...]]] = []
    for agent, section in agents.items():
        table = f"agents.{agent}"
        if not isinstance(section, dict) or set(section) - {"rules"}:
            raise PolicyError(where.table(table, 0), f"[{table}] may hold only rules")
        sections.append(
            (agent, _rules(section.get("rules", []), f"{table}.rules", agent, where, names))
        )
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return Policy(digest, rules, tuple(sections), text)


class _Where(Locator):
    """Where each rule is written, and the engine its regex conditions compile on."""

    def __init__(self, text: str, compile_regex: CompileRegex | None) -> None:
        super().__init__(text)
        self.compile_regex = compile_regex


def _rules(raw: object, table: str, layer: str, where: _Where, names: set[str]) -> tuple[Rule, ...]:
    if not isinstance(raw, list):
        raise PolicyError(where.top_key("rules"), f"{table} must be an array of tables")
    rules = []
    for index, entry in enumerate(raw):
        line = where.table(table, index)
        if not isinstance(entry, dict):
            raise PolicyError(line, f"{table}[{index}] must be a table")
        rule = _Reader(entry, line, where).rule(layer)
        if rule.name in names:
            raise PolicyError(where.key(line, "name"), f"two rules are named {rule.name!r}")
        names.add(rule.name)
        rules.append(rule)
    return tuple(rules)


@dataclass
class _Reader:
    entry: dict[str, object]
    line: int
    where: _Where

    def fail(self, key: str, reason: str) -> PolicyError:
        return PolicyError(self.where.key(self.line, key), reason)

    def rule(self, layer: str) -> Rule:
        unknown = sorted(set(self.entry) - RULE_KEYS)
        if unknown:
            raise self.fail(unknown[0], f"unknown key {unknown[0]!r} in a rule")
        name = self.entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PolicyError(self.line, "every rule needs a name (a non-empty string)")
        verdict = self.entry.get("verdict")
        if verdict not in ("allow", "ask", "deny"):
            raise self.fail("verdict", f'rule "{name}": verdict must be allow, ask or deny')
        self._check_verdict_keys(name, verdict)
        agents = self.names("agent")
        if layer != "global" and agents is not None and layer not in agents:
            raise self.fail("agent", f'rule "{name}" is in agent {layer!r}\'s section')
        return Rule(
            name=name,
            line=self.line,
            layer=layer,
            verdict=verdict,
            agents=self.globs("agent", agents),
            tools=self.globs("tool", self.names("tool")) or ("*",),
            effects=self.effects(),
            requesters=self.names("requester"),
            metadata=self.metadata(),
            when=self.predicates(),
            reason=str(self.entry.get("reason", "")),
            approvers=self.names("approvers") or (),
            quorum=self.quorum(),
            expires_in=self.duration(),
            default=self.default(),
            edits=self.flag("edits"),
        )

    def _check_verdict_keys(self, name: str, verdict: Verdict) -> None:
        if verdict != "ask":
            extra = sorted(ASK_KEYS & set(self.entry))
            if extra:
                raise self.fail(extra[0], f'rule "{name}": {extra[0]} applies only to ask')
        reason = self.entry.get("reason")
        if verdict == "deny" and (not isinstance(reason, str) or not reason.strip()):
            raise self.fail("verdict", f'rule "{name}": a deny needs a reason the model reads')
        if reason is not None and not isinstance(reason, str):
            raise self.fail("reason", f'rule "{name}": reason must be a string')

    def names(self, key: str) -> tuple[str, ...] | None:
        value = self.entry.get(key)
        if value is None:
            return None
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values:
            raise self.fail(key, f"{key} must be a string or a non-empty list of strings")
        if any(not isinstance(v, str) or not v.strip() for v in values):
            raise self.fail(key, f"every {key} must be a non-empty string")
        return tuple(cast(list[str], values))

    def globs(self, key: str, globs: tuple[str, ...] | None) -> tuple[str, ...] | None:
        long = next((g for g in globs or () if len(g) > MAX_GLOB_LENGTH), None)
        if long is not None:
            raise self.fail(key, f"a {key} glob is at most {MAX_GLOB_LENGTH} characters")
        return globs

    def effects(self) -> tuple[str, ...] | None:
        effects = self.names("effect")
        bad = [e for e in effects or () if e not in EFFECTS]
        if bad:
            raise self.fail("effect", f"effect {bad[0]!r} is none of {', '.join(EFFECTS)}")
        return effects

    def metadata(self) -> tuple[tuple[str, JsonValue], ...]:
        value = self.entry.get("metadata", {})
        if not isinstance(value, dict):
            raise self.fail("metadata", "metadata must be a table of key = value")
        return tuple(sorted((str(k), cast(JsonValue, v)) for k, v in value.items()))

    def predicates(self) -> tuple[Predicate, ...]:
        value = self.entry.get("when", [])
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list):
            raise self.fail("when", "when must be a list of {path, op, value} tables")
        return tuple(self.predicate(p) for p in value)

    def predicate(self, raw: object) -> Predicate:
        if not isinstance(raw, dict) or set(raw) != {"path", "op", "value"}:
            raise self.fail("when", "each condition is exactly {path = …, op = …, value = …}")
        path, op, value = raw["path"], raw["op"], raw["value"]
        if op not in OPS:
            raise self.fail("when", f"op {op!r} is none of {' '.join(OPS)}")
        try:
            parts = parse_path(path)
        except ValueError as exc:
            raise self.fail("when", str(exc)) from exc
        return _typed(cast(Op, op), str(path), parts, value, self)

    def pattern(self, path: str, source: str) -> Regex:
        try:
            return compile_pattern(source, self.where.compile_regex)
        except ValueError as exc:
            raise self.fail("when", f"{path} regex: {exc}") from exc

    def quorum(self) -> int:
        value = self.entry.get("quorum", 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail("quorum", "quorum must be a whole number of at least 1")
        return value

    def duration(self) -> float | None:
        value = self.entry.get("expires_in")
        if value is None:
            return None
        seconds = duration_seconds(value)
        if seconds is None or not math.isfinite(seconds):
            raise self.fail("expires_in", 'expires_in is seconds or "30m", "2h", "1d"')
        return seconds

    def default(self) -> ExpiryDefault | None:
        value = self.entry.get("default")
        if value is not None and value not in ("deny", "cancel"):
            raise self.fail("default", "default (on expiry) must be deny or cancel")
        return value

    def flag(self, key: str) -> bool:
        value = self.entry.get(key, True)
        if not isinstance(value, bool):
            raise self.fail(key, f"{key} must be true or false")
        return value


def _typed(
    op: Op, path: str, parts: tuple[str | int, ...], value: object, reader: _Reader
) -> Predicate:
    """The predicate, its value checked against its operator."""
    pattern = None
    if op in NUMERIC and not _is_number(value):
        raise reader.fail("when", f"{path} {op}: the value must be a finite number")
    if op == "in" and not isinstance(value, list):
        raise reader.fail("when", f"{path} in: the value must be a list")
    if op in ("prefix", "regex") and not isinstance(value, str):
        raise reader.fail("when", f"{path} {op}: the value must be a string")
    if op == "regex":
        pattern = reader.pattern(path, cast(str, value))
    if op == "prefix" and (why := unnormalised(cast(str, value))):
        raise reader.fail("when", f"{path} prefix: {why}")
    return Predicate(path, parts, op, cast(JsonValue, _plain(value)), pattern)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _plain(value: object) -> object:
    """TOML dates and times have no JSON type: refused where they would be compared."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
