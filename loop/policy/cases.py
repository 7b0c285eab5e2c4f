"""``airlock policy test``: calls with the verdicts they must get (a TOML file of
``[[cases]]``), run against a policy."""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from pydantic import JsonValue

from airlock.loop.policy.evaluate import CallFacts, judge
from airlock.loop.policy.locate import Locator
from airlock.loop.policy.parse import PolicyError
from airlock.loop.policy.rules import Policy
from airlock.loop.policy.verdicts import Judgement

CASE_KEYS = frozenset(
    {"name", "agent", "tool", "effect", "requester", "metadata", "arguments", "schema"}
    | {"expect", "rule", "approvers", "quorum"}
)

SchemaOf = Callable[[str, str], tuple[Mapping[str, JsonValue], str] | None]
"""A tool's JSON schema and effect, by agent and tool name (None: unknown here)."""


@dataclass(frozen=True, slots=True)
class CaseResult:
    name: str
    line: int
    got: Judgement
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems


def run_cases(policy: Policy, text: str, schema_of: SchemaOf | None = None) -> list[CaseResult]:
    """Judge every case of ``text``. Raises ``PolicyError`` for a malformed file."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(0, f"the cases file is not TOML: {exc}") from exc
    cases = raw.get("cases")
    if set(raw) != {"cases"} or not isinstance(cases, list) or not cases:
        raise PolicyError(0, "the cases file holds [[cases]] tables and nothing else")
    where = Locator(text)
    return [_run(policy, case, where.table("cases", i), schema_of) for i, case in enumerate(cases)]


def _run(policy: Policy, case: object, line: int, schema_of: SchemaOf | None) -> CaseResult:
    if not isinstance(case, dict) or set(case) - CASE_KEYS:
        raise PolicyError(line, f"a case holds only {', '.join(sorted(CASE_KEYS))}")
    for key in ("name", "agent", "tool", "expect"):
        if not isinstance(case.get(key), str):
            raise PolicyError(line, f"a case needs {key} (a string)")
    if case["expect"] not in ("allow", "ask", "deny"):
        raise PolicyError(line, "expect must be allow, ask or deny")
    known = schema_of(case["agent"], case["tool"]) if schema_of else None
    schema, effect = known if known else (case.get("schema", {}), "write")
    got = judge(
        policy,
        CallFacts(
            agent=case["agent"],
            tool=case["tool"],
            arguments=cast(dict[str, JsonValue], case.get("arguments", {})),
            effect=case.get("effect", effect),
            requester=case.get("requester"),
            metadata=cast(dict[str, JsonValue], case.get("metadata", {})),
            schema=cast(dict[str, JsonValue], schema),
        ),
    )
    return CaseResult(case["name"], line, got, tuple(_problems(case, got)))


def _problems(case: dict[str, object], got: Judgement) -> list[str]:
    problems = []
    if got.verdict != case["expect"]:
        problems.append(f"expected {case['expect']}, got {got.line()}")
    if "rule" in case and got.rule != case["rule"]:
        problems.append(f'expected rule "{case["rule"]}", got "{got.rule}"')
    if "quorum" in case and got.quorum != case["quorum"]:
        problems.append(f"expected quorum {case['quorum']}, got {got.quorum}")
    roles = sorted({r for s in got.approvers for r in s})
    if "approvers" in case and sorted(cast(list[str], case["approvers"])) != roles:
        problems.append(f"expected approvers {case['approvers']}, got {roles}")
    return problems
