"""The MCP gateway end to end: the SDK's own ``Client`` against ``airlock api``'s ``/mcp``,
a real upstream MCP server in its own process (``mcp_server``, counting each call it
runs), a real ``celery worker`` that makes the approved calls, PostgreSQL and Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, TextContent
from standardwebhooks import Webhook

from airlock.persistence.domain import Run, RunStatus
from airlock.workers.testing import SECRET, TOKEN, Stack, airlock_env, wait_for
from tests.integration.test_mcp import Bank, McpStack, bank, mcp_stack  # noqa: F401

pytestmark = pytest.mark.integration

POLICY = """version = 1

[[rules]]
name = "frozen-accounts"
tool = "bank__balance"
verdict = "deny"
reason = "account frozen"
when = [{ path = "account", op = "==", value = "frozen" }]

[[rules]]
name = "big-transfers-refused"
tool = "bank__transfer"
verdict = "deny"
reason = "over the limit"
when = [{ path = "amount", op = ">", value = 1000 }]

[[rules]]
name = "pocket-money-runs"
tool = "bank__transfer"
verdict = "allow"
when = [{ path = "amount", op = "<=", value = 1 }]
"""


async def acall(
    base: str, name: str, arguments: dict[str, Any], token: str = TOKEN
) -> CallToolResult | MCPError:
    http = create_mcp_http_client(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120)
    )
    async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
        try:
            return await client.call_tool(name, arguments)
        except MCPError as exc:  # raised here, not from the client's task group
            return exc


def call(base: str, name: str, arguments: dict[str, Any], token: str = TOKEN) -> CallToolResult:
    """One ``tools/call`` through the SDK's client, as any MCP client makes it."""
    found = anyio.run(acall, base, name, arguments, token)
    if isinstance(found, MCPError):
        raise found
    return found


def listed(base: str) -> dict[str, dict[str, Any]]:
    async def go() -> dict[str, dict[str, Any]]:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        async with http, Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
            tools = (await client.list_tools()).tools
            return {t.name: dict(t.input_schema) for t in tools}

    return anyio.run(go)


def text(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


def gateway_runs(stack: Stack) -> list[Run]:
    return list(stack.service.list_runs(agent="mcp", limit=50).runs)


def waiting_run(stack: Stack) -> Run:
    def found() -> Run | None:
        runs = [r for r in gateway_runs(stack) if r.status is RunStatus.WAITING_FOR_APPROVAL]
        return runs[0] if runs else None

    return wait_for("a held call's run to wait for approval", found, 60)


def cli_approve(stack: Stack, run_id: str) -> None:
    env = airlock_env(stack.config, stack.outbox)
    done = subprocess.run(
        [sys.executable, "-m", "airlock.workers", "approve", run_id, "--as", "carol"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def webhook_decide(base: str, run: Run, decision: str = "approve", reason: str = "") -> None:
    body = json.dumps(
        {"turn_digest": run.turn_digest, "decision": decision, "approver": "dora"}
        | ({"reason": reason} if reason else {})
    )
    webhook_id = f"msg_{uuid.uuid4().hex}"
    now = datetime.now(UTC)
    headers = {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(webhook_id, now, body),
        "content-type": "application/json",
    }
    answer = httpx.post(
        f"{base}/v1/runs/{run.id}/approval", content=body, headers=headers, timeout=30
    )
    assert answer.status_code == 202, answer.text


Gateway = Callable[..., tuple[Stack, str]]


@pytest.fixture
def gateway(mcp_stack: McpStack, tmp_path: Path) -> Iterator[Gateway]:  # noqa: F811
    def make(wait: str = "2") -> tuple[Stack, str]:
        policy = tmp_path / "policy.toml"
        policy.write_text(POLICY)
        stack = mcp_stack(
            AIRLOCK_API_TOKEN=TOKEN,
            AIRLOCK_WEBHOOK_SECRET=SECRET,
            AIRLOCK_MCP_WAIT=wait,
            AIRLOCK_POLICY=str(policy),
        )
        stack.worker()
        return stack, stack.api()

    yield make


def transfers(bank: Bank) -> dict[str, int]:  # noqa: F811
    return {k: n for k, n in bank.calls().items() if k.startswith("transfer ")}


def test_lists_tools_allows_denies_and_refuses_bad_input(gateway: Gateway, bank: Bank) -> None:  # noqa: F811
    stack, base = gateway()
    tools = listed(base)
    assert {"bank__balance", "bank__transfer", "bank__deposit"} <= set(tools)
    assert tools["bank__transfer"]["properties"]["amount"]["type"] == "integer"

    read = call(base, "bank__balance", {"account": "acme"})
    assert (read.is_error, text(read)) == (False, "acme: 100 EUR")
    small = call(base, "bank__transfer", {"to": "bob", "amount": 1})
    assert (small.is_error, text(small)) == (False, "sent 1 EUR to bob")

    frozen = call(base, "bank__balance", {"account": "frozen"})  # a deny refuses a read too
    assert frozen.is_error and "account frozen" in text(frozen)
    big = call(base, "bank__transfer", {"to": "bob", "amount": 5000})
    assert big.is_error and "over the limit" in text(big)

    with pytest.raises(MCPError, match='unknown tool "bank__steal"'):
        call(base, "bank__steal", {})
    invalid = call(base, "bank__transfer", {"to": "bob", "amount": "lots"})
    assert invalid.is_error and "amount" in text(invalid) and "no approval asked" in text(invalid)

    calls = bank.calls()
    assert sum(1 for k in calls if k.startswith("balance ")) == 1  # the frozen one never ran
    assert len(transfers(bank)) == 1  # the small one; not the big, nor the invalid
    assert gateway_runs(stack) == []  # nothing was held


def test_refuses_a_caller_without_the_token(gateway: Gateway) -> None:
    _, base = gateway()
    answer = httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert answer.status_code == 401
    assert answer.headers["content-type"].startswith("application/problem+json")
    with pytest.raises(Exception):  # noqa: B017 - the SDK's client fails to connect
        call(base, "bank__balance", {"account": "acme"}, token="wrong")


def test_approved_by_cli_while_the_caller_waits(gateway: Gateway, bank: Bank) -> None:  # noqa: F811
    stack, base = gateway(wait="60")
    answers: list[CallToolResult] = []
    caller = threading.Thread(
        target=lambda: answers.append(call(base, "bank__transfer", {"to": "eve", "amount": 7}))
    )
    caller.start()
    run = waiting_run(stack)
    view = stack.service.get_run(run.id)
    assert view.requested_by == "api-token"
    assert view.metadata["mcp"] == {
        "server": "bank", "tool": "bank__transfer", "principal": "api:api-token"
    }  # fmt: skip
    cli_approve(stack, run.id)
    caller.join(90)
    assert len(answers) == 1, "the call was not answered"
    assert (answers[0].is_error, text(answers[0])) == (False, "sent 7 EUR to eve")
    assert transfers(bank) == {f"transfer {run.id}:mcp_call": 1}


def test_approved_by_webhook_while_the_caller_waits(gateway: Gateway, bank: Bank) -> None:  # noqa: F811
    stack, base = gateway(wait="60")
    answers: list[CallToolResult] = []
    caller = threading.Thread(
        target=lambda: answers.append(call(base, "bank__transfer", {"to": "fay", "amount": 8}))
    )
    caller.start()
    run = waiting_run(stack)
    webhook_decide(base, run)
    caller.join(90)
    assert [(a.is_error, text(a)) for a in answers] == [(False, "sent 8 EUR to fay")]
    assert transfers(bank) == {f"transfer {run.id}:mcp_call": 1}


def test_pending_then_the_retry_on_another_instance_returns_it(
    gateway: Gateway,
    bank: Bank,  # noqa: F811
) -> None:
    stack, first = gateway(wait="1")
    second = stack.api()
    arguments = {"to": "gus", "amount": 9}
    pending = call(first, "bank__transfer", arguments)
    assert pending.is_error and text(pending).startswith("approval pending: run ")
    assert pending.meta is not None
    run_id = pending.meta["io.airlock/run"]
    assert pending.meta["io.airlock/status"] == "waiting_for_approval"
    assert run_id in text(pending)

    again = call(second, "bank__transfer", arguments)  # attaches: no second run
    assert again.meta is not None and again.meta["io.airlock/run"] == run_id
    assert len(gateway_runs(stack)) == 1

    webhook_decide(second, stack.run(run_id))
    stack.wait_status(run_id, RunStatus.COMPLETED, timeout=60)
    done = call(second, "bank__transfer", arguments)
    assert (done.is_error, text(done)) == (False, "sent 9 EUR to gus")
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}

    anew = call(first, "bank__transfer", arguments)  # returned once: a new call
    assert anew.meta is not None and anew.meta["io.airlock/run"] != run_id
    assert len(gateway_runs(stack)) == 2
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}

    stats = subprocess.run(
        [sys.executable, "-m", "airlock.workers", "stats", "--json"],
        env=airlock_env(stack.config, stack.outbox), capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    figures = json.loads(stats.stdout)["mcp_gateway"]
    assert figures["held"] == [{"server": "bank", "tool": "bank__transfer", "calls": 1}]
    assert figures["returned"] == [{"server": "bank", "tool": "bank__transfer", "calls": 1}]
    assert figures["wait_p50_seconds"] > 0
    metrics = httpx.get(f"{second}/metrics", timeout=30).text
    assert (
        'airlock_mcp_gateway_calls_total{outcome="decided",server="bank",tool="transfer"} 1.0'
        in metrics
    )


def test_a_denied_call_answers_the_reason(gateway: Gateway, bank: Bank) -> None:  # noqa: F811
    stack, base = gateway(wait="1")
    arguments = {"to": "hal", "amount": 10}
    pending = call(base, "bank__transfer", arguments)
    assert pending.meta is not None
    run_id = str(pending.meta["io.airlock/run"])
    webhook_decide(base, stack.run(run_id), "deny", "not today")
    stack.wait_status(run_id, RunStatus.COMPLETED, timeout=60)
    denied = call(base, "bank__transfer", arguments)
    assert denied.is_error and "not today" in text(denied)
    assert transfers(bank) == {}


def test_a_client_that_goes_away_while_waiting_loses_nothing(
    gateway: Gateway,
    bank: Bank,  # noqa: F811
) -> None:
    stack, base = gateway(wait="60")
    arguments = {"to": "ivy", "amount": 11}

    async def leave_early() -> None:
        with anyio.move_on_after(3):  # the client hangs up while its call is held
            await acall(base, "bank__transfer", arguments)

    anyio.run(leave_early)
    run = waiting_run(stack)
    webhook_decide(base, run)
    stack.wait_status(run.id, RunStatus.COMPLETED, timeout=60)
    done = call(base, "bank__transfer", arguments)  # attaches to the run it left
    assert (done.is_error, text(done)) == (False, "sent 11 EUR to ivy")
    assert transfers(bank) == {f"transfer {run.id}:mcp_call": 1}


def test_stdio_gateway_for_a_local_client(gateway: Gateway, bank: Bank) -> None:  # noqa: F811
    """``airlock gateway --stdio``: the same gate for a local client, as the operator."""
    stack, base = gateway(wait="1")
    env = airlock_env(stack.config, stack.outbox)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "airlock.workers", "gateway", "--stdio", "--as", "ann"],
        env=env,
    )

    async def session(name: str, arguments: dict[str, Any]) -> CallToolResult:
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "bank__transfer" in names
            return await client.call_tool(name, arguments)

    read = anyio.run(session, "bank__balance", {"account": "acme"})
    assert (read.is_error, text(read)) == (False, "acme: 100 EUR")
    arguments = {"to": "jon", "amount": 12}
    pending = anyio.run(session, "bank__transfer", arguments)
    assert pending.is_error and pending.meta is not None
    run_id = str(pending.meta["io.airlock/run"])
    run = stack.service.get_run(run_id)
    assert run.requested_by == "ann"
    assert run.metadata["mcp"] == {
        "server": "bank", "tool": "bank__transfer", "principal": "cli:ann"
    }  # fmt: skip
    webhook_decide(base, run)
    stack.wait_status(run_id, RunStatus.COMPLETED, timeout=60)
    done = anyio.run(session, "bank__transfer", arguments)
    assert (done.is_error, text(done)) == (False, "sent 12 EUR to jon")
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}


def test_an_allowed_call_of_a_tool_changed_upstream_is_not_sent(
    gateway: Gateway,
    bank: Bank,  # noqa: F811
) -> None:
    _, base = gateway()
    assert not call(base, "bank__transfer", {"to": "kim", "amount": 1}).is_error
    bank.stop()
    bank.start(variant="2")  # transfer's description changed: its fingerprint too
    drifted = call(base, "bank__transfer", {"to": "kim", "amount": 1})
    assert drifted.is_error
    assert text(drifted) == (
        'Error: tool "bank__transfer" changed upstream since it was pinned; not executed.'
    )
    assert len(transfers(bank)) == 1
