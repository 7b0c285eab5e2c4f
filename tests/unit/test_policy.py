"""The policy file: parsing (errors name the line), typed predicates, order, fail-closed,
layers, and the strictest of file and code."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from pydantic import JsonValue

from airlock.loop.policy import (
    NO_RULE,
    CallFacts,
    Judgement,
    PolicyError,
    decide,
    judge,
    lint,
    parse_policy,
    run_cases,
    strictest,
)
from airlock.workers.service.policy_regex import compile_re2

REFUNDS = """\
version = 1

[[rules]]
name = "huge"
tool = "refund"
verdict = "deny"
reason = "too much"
when = [{ path = "amount", op = ">", value = 5000 }]

[[rules]]
name = "large"
tool = "refund"
verdict = "ask"
approvers = ["support-leads"]
quorum = 2
expires_in = "2h"
default = "cancel"
edits = false
when = [{ path = "amount", op = ">", value = 100 }]

[[rules]]
name = "small"
tool = "refund"
verdict = "allow"
when = [{ path = "amount", op = "<=", value = 100 }]
"""
NUMBER: dict[str, JsonValue] = {"type": "object", "properties": {"amount": {"type": "number"}}}


def refund(amount: JsonValue, schema: dict[str, JsonValue] | None = None) -> Judgement:
    facts = CallFacts("support", "refund", {"amount": amount}, "write", schema=schema or NUMBER)
    return judge(parse_policy(REFUNDS), facts)


@pytest.mark.parametrize(
    ("amount", "verdict", "rule"),
    [(50, "allow", "small"), (100, "allow", "small"), (100.5, "ask", "large"),
     (5000, "ask", "large"), (5001, "deny", "huge"), (1e4, "deny", "huge")],
)  # fmt: skip
def test_thresholds(amount: float, verdict: str, rule: str) -> None:
    got = refund(amount)
    assert (got.verdict, got.rule) == (verdict, rule)
    assert len(got.sha256) == 64


def test_an_ask_carries_its_parameters() -> None:
    got = refund(500)
    assert got.approvers == (("support-leads",),)
    assert (got.quorum, got.expires_in, got.default, got.edits) == (2, 7200.0, "cancel", False)


def test_a_deny_carries_the_reason_the_model_reads() -> None:
    assert refund(9999).reason == "too much"


@pytest.mark.parametrize(
    ("amount", "why"),
    [("100", "is a string"), ("1e3", "is a string"), (math.nan, "non-finite"),
     (math.inf, "non-finite"), (True, "is a boolean"), (None, "is a null"), ([1], "is a array")],
)  # fmt: skip
def test_a_value_made_to_look_like_a_number_is_asked(amount: JsonValue, why: str) -> None:
    got = refund(amount)
    assert got.verdict == "ask"
    assert got.error is not None and why in got.error


def test_without_a_declared_type_a_string_is_still_no_number() -> None:
    got = refund("50", schema={"type": "object"})
    assert got.verdict == "ask" and "not a number" in (got.error or "")


def test_an_integer_declared_number_and_an_integral_float_declared_integer_compare() -> None:
    integer: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
    }
    assert refund(50.0, integer).verdict == "allow"
    assert refund(50, NUMBER).verdict == "allow"
    assert refund(50.5, integer).verdict == "ask"


def test_a_missing_argument_is_asked_even_when_a_later_rule_would_allow() -> None:
    got = judge(parse_policy(REFUNDS), CallFacts("support", "refund", {}, "write"))
    assert got.verdict == "ask" and got.rule == "huge" and "missing" in (got.error or "")


def test_nothing_matched_is_ask() -> None:
    got = judge(parse_policy(REFUNDS), CallFacts("support", "wipe", {}, "write"))
    assert (got.verdict, got.rule) == ("ask", NO_RULE)


def test_deny_then_ask_then_allow_whatever_the_file_order() -> None:
    text = """
[[rules]]
name = "all-allowed"
verdict = "allow"
[[rules]]
name = "all-asked"
verdict = "ask"
[[rules]]
name = "all-denied"
verdict = "deny"
reason = "no"
"""
    got = judge(parse_policy(text), CallFacts("a", "t", {}))
    assert (got.verdict, got.rule) == ("deny", "all-denied")


@pytest.mark.parametrize(
    ("op", "value", "argument", "holds"),
    [("==", "EUR", "EUR", True), ("==", 1, True, False), ("!=", "EUR", "USD", True),
     ("in", ["a", "b"], "b", True), ("in", [1, 2], "1", False), ("prefix", "acct_", "acct_9", True),
     ("regex", "^[0-9]+$", "12a", False), ("regex", "^[0-9]+$", "12", True),
     ("<", 3, 2, True), (">=", 3, 3, True), ("==", 100, 100.0, True)],
)  # fmt: skip
def test_operators(op: str, value: JsonValue, argument: JsonValue, holds: bool) -> None:
    import json

    text = f"""
[[rules]]
name = "r"
verdict = "allow"
when = [{{ path = "x.y[0]", op = "{op}", value = {json.dumps(value)} }}]
"""
    got = judge(parse_policy(text, compile_re2), CallFacts("a", "t", {"x": {"y": [argument]}}))
    assert got.verdict == ("allow" if holds else "ask")


def test_matchers_agent_tool_glob_effect_requester_metadata() -> None:
    text = """
[[rules]]
name = "r"
agent = "sup*"
tool = ["github__*", "refund"]
effect = "write"
requester = ["alice"]
metadata = { tier = "gold" }
verdict = "allow"
"""
    policy = parse_policy(text)
    gold: dict[str, JsonValue] = {"tier": "gold"}
    facts = CallFacts("support", "github__merge", {}, "write", "alice", gold)
    assert judge(policy, facts).verdict == "allow"
    for other in [
        replace(facts, agent="ops"),
        replace(facts, tool="gitlab__merge"),
        replace(facts, effect="idempotent_write"),
        replace(facts, requester="bob"),
        replace(facts, metadata={"tier": "silver"}),
        replace(facts, metadata={}),
    ]:
        assert judge(policy, other).verdict == "ask", other


SECTIONED = """
[[rules]]
name = "refunds-run"
tool = "refund"
verdict = "allow"

[agents.support]
[[agents.support.rules]]
name = "support-asks-vip"
verdict = "ask"
approvers = ["vip-desk"]
metadata = { tier = "vip" }

[[agents.support.rules]]
name = "support-allows-everything"
verdict = "allow"
"""


def test_an_agent_section_narrows_and_cannot_widen() -> None:
    policy = parse_policy(SECTIONED)
    vip = CallFacts("support", "refund", {}, metadata={"tier": "vip"})
    assert (judge(policy, vip).verdict, judge(policy, vip).rule) == ("ask", "support-asks-vip")
    plain = CallFacts("support", "refund", {})
    assert judge(policy, plain).verdict == "allow"
    # the section allows everything, but the global rules ask for what they do not allow
    assert judge(policy, CallFacts("support", "wipe", {})).verdict == "ask"
    assert judge(policy, CallFacts("other", "refund", {}, metadata={"tier": "vip"})).verdict == (
        "allow"
    )


def test_strictest_merges_two_asks() -> None:
    one = Judgement("ask", "a", "h", approvers=(("x",),), quorum=2, expires_in=60, default="deny")
    two = Judgement("ask", "b", "h", approvers=(("y",),), quorum=3, expires_in=30, edits=False)
    merged = strictest(one, two)
    assert merged.approvers == (("x",), ("y",))
    assert (merged.quorum, merged.expires_in, merged.default, merged.edits) == (
        3,
        30,
        "deny",
        False,
    )
    assert strictest(Judgement("allow", "a", "h"), Judgement("deny", "b", "h")).rule == "b"


R = '[[rules]]\nname = "a"\n'
ALLOW = 'verdict = "allow"\n'


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (R + 'verdict = "alow"\n', 3, "verdict must be"),
        ('[[rules]]\nname = "a"\nverdict = "deny"\n', 3, "needs a reason"),
        ('version = 1\n\n' + R + ALLOW + 'when = [{path="x", op="=~", value=1}]\n', 6, "'=~'"),
        (R + ALLOW + 'when = [{ path = "x", op = "<", value = "100" }]\n', 4, "finite number"),
        (R + ALLOW + 'when = [{ path = "x", op = "regex", value = "(" }]\n', 4, "regex"),
        ('[[rules]]\nname = "a"\nverdict = "allow"\nquorum = 2\n', 4, "only to ask"),
        ('[[rules]]\nname = "a"\nverdict = "ask"\nquorum = 0\n', 4, "quorum"),
        ('[[rules]]\nname = "a"\nverdict = "ask"\nexpires_in = "soon"\n', 4, "expires_in"),
        ('[[rules]]\nname = "a"\nverdict = "ask"\nexpires_in = "\u0663h"\n', 4, "expires_in"),
        # 400 digits: float() gives inf, which no suspension's expiry could hold
        ('[[rules]]\nname = "a"\nverdict = "ask"\nexpires_in = "' + "9" * 400 + 's"\n', 4, "expi"),
        ('[[rules]]\nname = "a"\nverdict = "ask"\nmystery = 1\n', 4, "unknown key 'mystery'"),
        (R + 'verdict = "ask"\n\n' + R + 'verdict = "ask"\n', 6, "two rules"),
        ('[[rules]]\nname = "a"\nverdict = "ask"\neffect = "delete"\n', 4, "effect 'delete'"),
        ('[[rules]]\nname = "a"\nverdict = [\n', 3, ""),
        ('rule = []\n', 1, "unknown key 'rule'"),
        ('[agents.x]\n[[agents.x.rules]]\nname = "a"\nagent = "y"\nverdict = "ask"\n', 4, "sect"),
    ],
)  # fmt: skip
def test_a_malformed_file_names_the_line_and_the_reason(text: str, line: int, reason: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, compile_re2)
    assert info.value.line == line
    assert reason in info.value.reason
    assert str(info.value).startswith(f"line {line}: ")


def test_lint_warns_of_shadowed_and_impossible_rules() -> None:
    text = """
[[rules]]
name = "every-refund"
tool = "refund*"
verdict = "ask"

[[rules]]
name = "big-refund"
tool = "refund"
verdict = "ask"
when = [{ path = "amount", op = ">", value = 5 }]

[[rules]]
name = "never"
tool = "x"
verdict = "allow"
when = [{ path = "a", op = ">", value = 10 }, { path = "a", op = "<=", value = 10 }]

[[rules]]
name = "fine"
tool = "x"
verdict = "allow"
"""
    warnings = [str(w) for w in lint(parse_policy(text))]
    assert warnings == [
        'line 7: rule "big-refund" is shadowed by rule "every-refund" (line 2), tried before it '
        "and matching every call it matches",
        'line 13: rule "never" can never match: no number is both > 10 and <= 10 at a',
    ]


def test_explain_says_why_each_earlier_rule_did_not_match() -> None:
    facts = CallFacts("support", "refund", {"amount": 50}, "write", schema=NUMBER)
    got, steps = decide(parse_policy(REFUNDS), facts)
    assert got.rule == "small"
    assert [(s.rule.name, s.outcome, s.why) for s in steps] == [
        ("huge", "skipped", "not amount > 5000"),
        ("large", "skipped", "not amount > 100"),
        ("small", "matched", "every condition holds"),
    ]


def test_cases_report_mismatches() -> None:
    cases = """
[[cases]]
name = "ok"
agent = "support"
tool = "refund"
arguments = { amount = 5 }
expect = "allow"

[[cases]]
name = "wrong"
agent = "support"
tool = "refund"
arguments = { amount = 500 }
expect = "ask"
quorum = 3
"""
    results = run_cases(parse_policy(REFUNDS), cases)
    assert [r.passed for r in results] == [True, False]
    assert results[1].problems == ("expected quorum 3, got 2",)
    assert results[1].line == 9
