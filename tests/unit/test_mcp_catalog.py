"""MCP tools as Airlock sees them: names, the effect the operator decides, fingerprints,
results cut and summarised."""

from __future__ import annotations

import pytest
from mcp.types import CallToolResult, ImageContent, TextContent
from pydantic import JsonValue

from airlock.loop import Effect
from airlock.loop.policy import parse_policy
from airlock.loop.policy.evaluate import CallFacts, judge
from airlock.workers.mcp.catalog import (
    BadToolError,
    Definition,
    check_schema,
    decide_effect,
    full_name,
)
from airlock.workers.mcp.config import parse_servers
from airlock.workers.mcp.runtime import RESULT_LIMIT, outcome_of

SCHEMA: dict[str, JsonValue] = {"type": "object", "properties": {"to": {"type": "string"}}}


def definition(name: str = "transfer", **annotations: JsonValue) -> Definition:
    return Definition(name, "Move money.", SCHEMA, dict(annotations) or None)


def server(trust: bool, tools: str = "") -> object:
    text = f'[servers.bank]\nurl = "http://x/mcp"\ntrust_annotations = {str(trust).lower()}\n'
    return parse_servers(text + tools, "s.toml", {}).get("bank")


@pytest.mark.parametrize(
    ("trust", "declared", "annotations", "effect"),
    [
        (False, None, {}, Effect.WRITE),  # unannotated, undeclared: asks
        (False, None, {"readOnlyHint": True}, Effect.WRITE),  # a hint is not trusted
        (True, None, {"readOnlyHint": True}, Effect.READ),
        (True, None, {"idempotentHint": True}, Effect.IDEMPOTENT_WRITE),
        (True, None, {"destructiveHint": False}, Effect.WRITE),  # additive is still a write
        (True, None, {}, Effect.WRITE),
        (True, "write", {"readOnlyHint": True}, Effect.WRITE),  # the declaration wins
        (False, "read", {"destructiveHint": True}, Effect.READ),
        (False, "idempotent_write", {}, Effect.IDEMPOTENT_WRITE),
    ],
)
def test_the_effect_is_the_operators_word_first(
    trust: bool, declared: str | None, annotations: dict[str, JsonValue], effect: Effect
) -> None:
    tools = f'[servers.bank.tools]\ntransfer = {{ effect = "{declared}" }}\n' if declared else ""
    config = server(trust, tools)
    assert decide_effect(config, definition(**annotations)) is effect  # type: ignore[arg-type]


def test_the_fingerprint_covers_name_description_schema_and_annotations() -> None:
    base = definition(readOnlyHint=True)
    assert base.fingerprint() == definition(readOnlyHint=True).fingerprint()
    changed = [
        Definition("transfer2", base.description, SCHEMA, base.annotations),
        Definition("transfer", "Move money, or anything.", SCHEMA, base.annotations),
        Definition("transfer", base.description, {**SCHEMA, "required": ["to"]}, base.annotations),
        Definition("transfer", base.description, SCHEMA, {"readOnlyHint": False}),
    ]
    assert len({base.fingerprint(), *(d.fingerprint() for d in changed)}) == 5
    assert Definition.from_json(base.as_json()) == base


def test_names_a_model_api_refuses_are_refused_not_mapped() -> None:
    assert full_name("bank", "transfer") == "bank__transfer"
    for bad in ("a__b", "has space", "dot.ted", "ünï", "x" * 60, ""):
        with pytest.raises(BadToolError, match="is not offered"):
            full_name("bank", bad)


def test_a_schema_that_is_not_a_json_schema_object_is_refused() -> None:
    check_schema(definition())
    for schema in ({"type": "string"}, {}, {"type": "object", "properties": [1]}):
        with pytest.raises(BadToolError, match="input schema"):
            check_schema(Definition("t", "", schema, None))  # type: ignore[arg-type]


def test_the_policy_file_matches_mcp_tools_by_full_name_and_glob() -> None:
    policy = parse_policy(
        '[[rules]]\nname = "reads"\ntool = "bank__balance"\nverdict = "allow"\n'
        '[[rules]]\nname = "bank"\ntool = "bank__*"\nverdict = "deny"\nreason = "no"\n'
        '[[rules]]\nname = "transfers"\ntool = "bank__transfer"\nverdict = "ask"\n'
    )

    def rule_for(tool: str) -> str:
        return judge(policy, CallFacts("agent", tool, {"to": "x"}, effect="write")).rule

    assert rule_for("bank__transfer") == "bank"  # deny before ask before allow
    assert rule_for("bank__balance") == "bank"
    assert rule_for("files__read") != "bank"  # another server's tool: no rule matches
    allow_only = parse_policy('[[rules]]\nname = "r"\ntool = "bank__balance"\nverdict = "allow"\n')
    assert judge(allow_only, CallFacts("a", "bank__balance", {})).verdict == "allow"
    assert judge(allow_only, CallFacts("a", "bank__balancer", {})).verdict == "ask"


def test_a_huge_result_is_cut_and_other_content_summarised() -> None:
    result = CallToolResult(
        content=[
            TextContent(type="text", text="x" * (RESULT_LIMIT + 10)),
            ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
        ]
    )
    outcome = outcome_of(result)
    assert outcome.text.count("x") == RESULT_LIMIT
    assert f"[cut: the result had {RESULT_LIMIT + 10} characters" in outcome.text
    assert outcome.text.endswith("[image image/png, 8 characters of data; kept in the run's "
                                 "events, not shown]")  # fmt: skip
    assert not outcome.is_error
    content = outcome.raw["content"]
    assert isinstance(content, list) and content[1] == {
        "type": "image", "data": "aGVsbG8=", "mimeType": "image/png",
    }  # fmt: skip
    assert outcome_of(CallToolResult(content=[], is_error=True)).is_error
