"""Property: for random rule sets and calls, the file's verdict never allows a call that
any matching deny or ask covers (in the global rules or the agent's section), and a call
a deny covers is never allowed nor merely judged by an allow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from airlock.loop.policy import CallFacts, Policy, Predicate, Rule, judge
from airlock.loop.policy.evaluate import skipped
from airlock.loop.policy.verdicts import Verdict
from airlock.workers.service.policy_regex import compile_re2

PATHS = ["a", "b"]
VALUES: st.SearchStrategy[JsonValue] = st.one_of(
    st.integers(-3, 3),
    st.floats(-3, 3),
    st.sampled_from([float("nan"), float("inf"), 2.0]),
    st.sampled_from(["x", "y", "1", "x1"]),
    st.booleans(),
    st.none(),
)


@st.composite
def predicates(draw: st.DrawFn) -> Predicate:
    path = draw(st.sampled_from(PATHS))
    op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "in", "prefix", "regex"]))
    if op in ("<", "<=", ">", ">="):
        value: JsonValue = draw(st.integers(-3, 3))
    elif op == "in":
        value = draw(st.lists(VALUES, max_size=3))
    elif op in ("prefix", "regex"):
        value = draw(st.sampled_from(["x", "1", "^y", ""]))
    else:
        value = draw(VALUES)
    pattern = compile_re2(value) if op == "regex" and isinstance(value, str) else None
    return Predicate(path, (path,), op, value, pattern)  # type: ignore[arg-type]


@st.composite
def rules(draw: st.DrawFn, layer: str, index: int) -> Rule:
    verdict: Verdict = draw(st.sampled_from(["allow", "ask", "deny"]))
    return Rule(
        name=f"{layer}-{index}",
        line=index + 1,
        layer=layer,
        verdict=verdict,
        agents=draw(st.none() | st.just(("agent-a",))),
        tools=draw(st.sampled_from([("*",), ("t*",), ("t1",), ("u",)])),
        effects=draw(st.none() | st.just(("write",))),
        requesters=draw(st.none() | st.just(("alice",))),
        metadata=draw(st.sampled_from([(), (("tier", "gold"),)])),
        when=tuple(draw(st.lists(predicates(), max_size=2))),
        reason="no" if verdict == "deny" else "",
    )


@st.composite
def rule_sets(draw: st.DrawFn, layer: str) -> tuple[Rule, ...]:
    n = draw(st.integers(0, 5))
    return tuple(draw(rules(layer, i)) for i in range(n))


@st.composite
def calls(draw: st.DrawFn) -> CallFacts:
    arguments = draw(st.dictionaries(st.sampled_from(PATHS), VALUES, max_size=2))
    declared: dict[str, JsonValue] = draw(
        st.sampled_from([{}, {"a": {"type": "integer"}}, {"b": {"type": "string"}}])
    )
    return CallFacts(
        agent=draw(st.sampled_from(["agent-a", "agent-b"])),
        tool=draw(st.sampled_from(["t1", "t2", "u"])),
        arguments=arguments,
        effect=draw(st.sampled_from(["write", "idempotent_write"])),
        requester=draw(st.sampled_from([None, "alice", "bob"])),
        metadata=draw(st.sampled_from([{}, {"tier": "gold"}])),
        schema={"type": "object", "properties": declared},
    )


def covers(rule: Rule, facts: CallFacts) -> bool:
    """The rule matches the call, or cannot tell (which must never let it through)."""
    try:
        return skipped(rule, facts) is None
    except Exception:
        return True


@settings(max_examples=600, deadline=None)
@given(rule_sets("global"), rule_sets("agent-a"), calls())
def test_a_matching_deny_or_ask_is_never_allowed(
    global_rules: tuple[Rule, ...], section: tuple[Rule, ...], facts: CallFacts
) -> None:
    policy = Policy("0" * 64, global_rules, (("agent-a", section),) if section else ())
    got = judge(policy, facts)
    layers = [global_rules] + ([section] if facts.agent == "agent-a" else [])
    considered = [r for layer in layers for r in layer]
    if any(r.verdict in ("deny", "ask") and covers(r, facts) for r in considered):
        assert got.verdict != "allow"
    if any(r.verdict == "deny" and skipped_cleanly(r, facts) for r in considered):
        assert got.verdict != "allow"
    if got.verdict == "allow":
        assert any(r.verdict == "allow" and covers(r, facts) for r in global_rules)


def skipped_cleanly(rule: Rule, facts: CallFacts) -> bool:
    try:
        return skipped(rule, facts) is None
    except Exception:
        return False
