"""Small agents and tools shared by the loop's unit tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, JsonValue

from airlock.loop import (
    Agent,
    ApprovalPolicy,
    Effect,
    RequiresApproval,
    ScriptedModel,
    Tool,
    ToolContext,
    tool,
)
from airlock.loop.messages import JsonObject


class Recorder:
    """Tools that write down every time they really ran."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JsonObject, str]] = []

    def tools(self) -> list[Tool]:
        calls = self.calls

        @tool
        def lookup(q: str) -> str:
            """Look a customer up."""
            return f"customer {q}: alice@example.com"

        @tool(effect=Effect.WRITE)
        def send_email(to: str, body: str, ctx: ToolContext) -> str:
            """Send an email."""
            calls.append(("send_email", {"to": to, "body": body}, ctx.idempotency_key))
            return f"sent to {to}"

        @tool(effect=Effect.IDEMPOTENT_WRITE)
        def upsert(key: str, value: int, ctx: ToolContext) -> dict[str, JsonValue]:
            calls.append(("upsert", {"key": key, "value": value}, ctx.idempotency_key))
            return {"key": key, "value": value}

        @tool
        def explode(why: str) -> str:
            raise RuntimeError(f"boom: {why}")

        class WipeArgs(BaseModel):
            table: str

        class Wipe(Tool, RequiresApproval):
            name = "wipe"
            description = "Delete every row of a table."
            arguments = WipeArgs

            def invoke(self, arguments: JsonObject, ctx: ToolContext) -> JsonValue:
                calls.append(("wipe", arguments, ctx.idempotency_key))
                return "wiped"

        return [lookup, send_email, upsert, explode, Wipe()]


def make_agent(
    steps: Sequence[Mapping[str, JsonValue]],
    recorder: Recorder,
    *,
    max_iterations: int = 10,
    token_budget: int | None = None,
    policy: ApprovalPolicy | None = None,
    drop: Sequence[str] = (),
) -> Agent:
    return Agent(
        name="mailer",
        model=ScriptedModel(steps),
        tools=[t for t in recorder.tools() if t.name not in drop],
        instructions="You send mail carefully.",
        max_iterations=max_iterations,
        token_budget=token_budget,
        approval_policy=policy,
    )


def call(name: str, **arguments: JsonValue) -> dict[str, JsonValue]:
    return {"name": name, "arguments": arguments}


def calls(*items: dict[str, JsonValue], usage: tuple[int, int] = (0, 0)) -> dict[str, JsonValue]:
    return {
        "tool_calls": list(items),
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
    }


def answer(text: str, usage: tuple[int, int] = (0, 0)) -> dict[str, JsonValue]:
    return {"content": text, "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}
