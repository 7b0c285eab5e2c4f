"""The MCP gateway's Tasks extension end to end: the SDK's own ``Client`` (with the
extension's client side, ``tasks_client``) and raw 2026-07-28 requests against two
``airlock api`` instances on one database, a real upstream MCP server in its own process,
a real ``celery worker``, PostgreSQL and Redis. A held call is a task at once; any
instance answers ``tasks/get`` from the database; a task is its principal's alone."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult
from sqlalchemy import text as sql_text

from airlock.persistence.domain import RunStatus
from airlock.workers.service.principals import Principal
from airlock.workers.testing import SECRET, TOKEN, Stack, airlock_env, wait_for
from tests.integration.tasks_client import (
    EXTENSION,
    CreatedTask,
    DetailedTask,
    Tasks,
    cancel_task,
    get_task,
    raw,
)
from tests.integration.test_gateway import (
    POLICY,
    cli_approve,
    gateway_runs,
    text,
    transfers,
    webhook_decide,
)
from tests.integration.test_mcp import Bank, McpStack, bank, mcp_stack  # noqa: F401
from tests.issuer import AUDIENCE, Issuer

pytestmark = pytest.mark.integration


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as issuer:
        yield issuer


@pytest.fixture
def two(mcp_stack: McpStack, tmp_path: Path, issuer: Issuer) -> tuple[Stack, str, str]:  # noqa: F811
    """A stack with a worker and two API instances that take the issuer's tokens."""
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    stack = mcp_stack(
        AIRLOCK_API_TOKEN=TOKEN,
        AIRLOCK_WEBHOOK_SECRET=SECRET,
        AIRLOCK_MCP_WAIT="60",  # a task-aware client never waits for it
        AIRLOCK_POLICY=str(policy),
    )
    stack.worker()
    oidc = {"AIRLOCK_OIDC_ISSUER": issuer.url, "AIRLOCK_OIDC_AUDIENCE": AUDIENCE}
    return stack, stack.api(**oidc), stack.api(**oidc)


async def with_session(base: str, token: str, work: Any, *, tasks: Tasks | None = None) -> Any:
    http = create_mcp_http_client(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(120)
    )
    extensions = [tasks or Tasks()]
    async with (
        http,
        Client(
            streamable_http_client(f"{base}/mcp", http_client=http), extensions=extensions
        ) as client,
    ):
        return await work(client)


def held_task(base: str, token: str, arguments: dict[str, Any]) -> CreatedTask:
    """A ``tools/call`` of ``bank__transfer`` by a task-aware client, as it was answered."""

    async def call(client: Client) -> CreatedTask:
        found = await client.session.call_tool("bank__transfer", arguments, allow_claimed=True)
        assert isinstance(found, CreatedTask), found
        return found

    created: CreatedTask = anyio.run(with_session, base, token, call)
    return created


def poll(base: str, token: str, task_id: str) -> DetailedTask:
    async def get(client: Client) -> DetailedTask:
        return await get_task(client.session, task_id)

    found: DetailedTask = anyio.run(with_session, base, token, get)
    return found


def refused(base: str, token: str, method: str, task_id: str) -> MCPError:
    async def go(client: Client) -> MCPError:
        try:
            if method == "tasks/get":
                await get_task(client.session, task_id)
            else:
                await cancel_task(client.session, task_id)
        except MCPError as exc:
            return exc
        raise AssertionError(f"{method} of {task_id} was answered")

    error: MCPError = anyio.run(with_session, base, token, go)
    return error


def test_a_task_aware_client_gets_its_result_through_tasks_get(
    two: tuple[Stack, str, str],
    bank: Bank,  # noqa: F811
) -> None:
    stack, base, _ = two
    tasks = Tasks()
    answers: list[CallToolResult] = []

    async def call(client: Client) -> CallToolResult:
        return await client.call_tool("bank__transfer", {"to": "liv", "amount": 13})

    failures: list[BaseException] = []

    def make_the_call() -> None:
        try:
            answers.append(anyio.run(partial(with_session, tasks=tasks), base, TOKEN, call))
        except BaseException as exc:
            failures.append(exc)

    caller = threading.Thread(target=make_the_call)
    caller.start()

    # the call was answered with a task while it waits (MCP_WAIT is 60 s): the client polls
    def held() -> DetailedTask | None:
        said = [t for t in tasks.polls if (t.status_message or "").startswith("approval pending")]
        return said[0] if said else None

    wait_for("the client to poll its task", lambda: held() or failures, 60)
    assert failures == []
    assert [t.status for t in tasks.created] == ["working"]
    task = held()
    assert task is not None and task.status == "working" and task.poll_interval_ms == 2000
    run_id = str(task.meta["io.airlock/run"]) if task.meta else ""
    assert stack.run(run_id).status is RunStatus.WAITING_FOR_APPROVAL

    webhook_decide(base, stack.run(run_id))
    caller.join(90)
    assert [(a.is_error, text(a)) for a in answers] == [(False, "sent 13 EUR to liv")]
    assert tasks.polls[-1].status == "completed"
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}


def test_any_instance_answers_a_task_and_only_to_its_principal(
    two: tuple[Stack, str, str],
    bank: Bank,  # noqa: F811
    issuer: Issuer,
) -> None:
    stack, first, second = two
    ann, bob = issuer.token("ann"), issuer.token("bob")
    arguments = {"to": "max", "amount": 14}
    created = held_task(first, ann, arguments)
    assert (created.result_type, created.status) == ("task", "working")
    assert created.meta is not None
    run_id = str(created.meta["io.airlock/run"])
    run = stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    assert run.metadata["mcp"] == {
        "server": "bank", "tool": "bank__transfer", "principal": f"oidc:{issuer.url}:ann"
    }  # fmt: skip

    working = poll(second, ann, created.task_id)  # the other instance answers it
    assert (working.task_id, working.status, working.result) == (created.task_id, "working", None)
    # the same call again by ann attaches: the same task, no second run
    assert held_task(second, ann, arguments).task_id == created.task_id
    assert len(gateway_runs(stack)) == 1
    metrics = httpx.get(f"{second}/metrics", timeout=30).text
    assert 'airlock_mcp_gateway_held_calls{server="bank",tool="transfer"} 1.0' in metrics

    # another principal's task is not found: by bob, by the API token
    for token in (bob, TOKEN):
        for method in ("tasks/get", "tasks/cancel"):
            error = refused(second, token, method, created.task_id)
            assert error.code == -32602 and "not found" in error.message
    assert stack.run(run_id).status is RunStatus.WAITING_FOR_APPROVAL  # bob's cancel did nothing

    cli_approve(stack, run_id)
    stack.wait_status(run_id, RunStatus.COMPLETED, timeout=60)
    done = poll(first, ann, created.task_id)
    assert done.status == "completed"
    assert done.result is not None
    assert done.result["isError"] is False
    assert done.result["content"] == [{"type": "text", "text": "sent 14 EUR to max"}]
    assert poll(second, ann, created.task_id).result == done.result  # polled again: the same
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}

    anew = held_task(first, ann, arguments)  # its result was returned: an identical call is new
    assert anew.task_id != created.task_id
    assert len(gateway_runs(stack)) == 2
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}


def test_a_denied_task_completes_with_the_reason_and_a_cancelled_one_runs_nothing(
    two: tuple[Stack, str, str],
    bank: Bank,  # noqa: F811
    issuer: Issuer,
) -> None:
    stack, first, second = two
    ann = issuer.token("ann")
    denied = held_task(first, ann, {"to": "ned", "amount": 15})
    assert denied.meta is not None
    denied_run = str(denied.meta["io.airlock/run"])
    stack.wait_status(denied_run, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    webhook_decide(first, stack.run(denied_run), "deny", "not this month")
    stack.wait_status(denied_run, RunStatus.COMPLETED, timeout=60)
    found = poll(second, ann, denied.task_id)
    assert found.status == "completed" and found.result is not None
    assert found.result["isError"] is True
    assert "not this month" in found.result["content"][0]["text"]

    withdrawn = held_task(first, ann, {"to": "ola", "amount": 16})
    assert withdrawn.meta is not None
    withdrawn_run = str(withdrawn.meta["io.airlock/run"])
    stack.wait_status(withdrawn_run, RunStatus.WAITING_FOR_APPROVAL, timeout=60)

    async def cancel(client: Client) -> None:
        await cancel_task(client.session, withdrawn.task_id)

    anyio.run(with_session, second, ann, cancel)
    stack.wait_status(withdrawn_run, RunStatus.CANCELLED, timeout=30)
    gone = poll(first, ann, withdrawn.task_id)
    assert gone.status == "cancelled" and gone.result is None
    assert transfers(bank) == {}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_in_arguments_are_refused_before_any_approval(
    two: tuple[Stack, str, str],
    bank: Bank,  # noqa: F811
    number: str,
) -> None:
    stack, base, _ = two
    arguments = {"to": "pia", "amount": "@number"}
    params = {"name": "bank__transfer", "arguments": arguments}
    answer = raw(
        base, "tools/call", params, token=TOKEN, name="bank__transfer",
        literal={'"@number"': number},
    )  # fmt: skip
    result = answer["result"]
    assert result["isError"] is True, answer
    said = result["content"][0]["text"]
    assert "not a finite number" in said and "no approval asked" in said
    assert gateway_runs(stack) == []
    assert transfers(bank) == {}


def test_task_requests_out_of_turn_are_refused(
    two: tuple[Stack, str, str],
    issuer: Issuer,
) -> None:
    stack, base, _ = two
    ann = issuer.token("ann")
    created = held_task(base, ann, {"to": "quy", "amount": 17})
    # a client that did not declare the extension on the request: -32021, naming it
    plain = raw(base, "tasks/get", {"taskId": created.task_id}, token=ann, tasks=False)
    assert plain["error"]["code"] == -32021
    assert plain["error"]["data"]["requiredCapabilities"] == {"extensions": {EXTENSION: {}}}
    for task_id in ("nope", "0" * 36, "", "x" * 5000):
        answer = raw(base, "tasks/get", {"taskId": task_id}, token=ann)
        assert answer["error"]["code"] == -32602, (task_id, answer)
    missing = raw(base, "tasks/get", {}, token=ann)
    assert missing["error"]["code"] == -32602
    update = raw(base, "tasks/update", {"taskId": created.task_id, "inputResponses": {}}, token=ann)
    assert update["result"]["resultType"] == "complete"
    assert len(gateway_runs(stack)) == 1
    assert stack.service.get_run(gateway_runs(stack)[0].id).status is (
        RunStatus.WAITING_FOR_APPROVAL
    )


def test_the_stdio_gateway_serves_tasks_to_a_local_client(
    two: tuple[Stack, str, str],
    bank: Bank,  # noqa: F811
) -> None:
    """``airlock gateway --stdio``: a task-aware local client gets its task at once and
    its result through ``tasks/get``, as the local operator."""
    stack, base, _ = two
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "airlock.workers", "gateway", "--stdio", "--as", "ann"],
        env=airlock_env(stack.config, stack.outbox),
    )
    arguments = {"to": "rex", "amount": 18}

    async def call() -> CreatedTask:
        async with Client(params, extensions=[Tasks()]) as client:
            found = await client.session.call_tool("bank__transfer", arguments, allow_claimed=True)
            assert isinstance(found, CreatedTask), found
            return found

    async def get(task_id: str) -> DetailedTask:
        async with Client(params, extensions=[Tasks()]) as client:
            return await get_task(client.session, task_id)

    created = anyio.run(call)
    assert created.meta is not None
    run_id = str(created.meta["io.airlock/run"])
    run = stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    assert run.metadata["mcp"] == {
        "server": "bank", "tool": "bank__transfer", "principal": "cli:ann"
    }  # fmt: skip
    assert anyio.run(get, created.task_id).status == "working"
    webhook_decide(base, run)
    stack.wait_status(run_id, RunStatus.COMPLETED, timeout=60)
    done = anyio.run(get, created.task_id)
    assert done.status == "completed" and done.result is not None
    assert done.result["content"] == [{"type": "text", "text": "sent 18 EUR to rex"}]
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}


def test_a_cancel_after_approval_withdraws_nothing_and_the_task_says_what_ran(
    two: tuple[Stack, str, str],
    bank: Bank,  # noqa: F811
    issuer: Issuer,
) -> None:
    """``tasks/cancel`` while the approved call is being made upstream (counted there,
    its answer slow): the call is no longer withdrawn, and the task completes with the
    upstream's result; a cancel while it waits withdraws it, and the identical call
    after it is a new call."""
    stack, first, second = two
    bank.stop()
    bank.start(slow=4)
    ann = issuer.token("ann")
    created = held_task(first, ann, {"to": "sam", "amount": 19})
    assert created.meta is not None
    run_id = str(created.meta["io.airlock/run"])
    webhook_decide(first, stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60))
    wait_for("the upstream transfer", lambda: transfers(bank), 60)

    async def cancel(client: Client) -> None:
        await cancel_task(client.session, created.task_id)

    anyio.run(with_session, second, ann, cancel)
    stack.wait_status(run_id, RunStatus.COMPLETED, timeout=60)
    done = poll(first, ann, created.task_id)
    assert done.status == "completed" and done.result is not None
    assert done.result["content"] == [{"type": "text", "text": "sent 19 EUR to sam"}]
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}

    arguments = {"to": "tia", "amount": 20}
    waiting = held_task(first, ann, arguments)
    assert waiting.meta is not None
    stack.wait_status(str(waiting.meta["io.airlock/run"]), RunStatus.WAITING_FOR_APPROVAL)

    async def withdraw(client: Client) -> None:
        await cancel_task(client.session, waiting.task_id)

    anyio.run(with_session, second, ann, withdraw)
    assert poll(first, ann, waiting.task_id).status == "cancelled"
    again = held_task(first, ann, arguments)  # withdrawn: the same call is a new one
    assert again.task_id != waiting.task_id and again.status == "working"
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}


def test_tasks_are_answered_across_dropped_database_connections(
    two: tuple[Stack, str, str],
    issuer: Issuer,
) -> None:
    """Every connection to the database is killed (a failover, a pooler) between polls:
    each instance's next ``tasks/get`` still answers, on a fresh connection."""
    stack, first, second = two
    ann = issuer.token("ann")
    created = held_task(first, ann, {"to": "uma", "amount": 21})
    engine = stack.service.store.engine
    for _ in range(3):
        with engine.connect() as c:
            c.execute(
                sql_text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
        for base in (first, second):
            assert poll(base, ann, created.task_id).status == "working"


def test_an_operator_cancel_during_the_call_leaves_the_task_waiting_for_its_outcome(
    two: tuple[Stack, str, str],
    bank: Bank,  # noqa: F811
    issuer: Issuer,
) -> None:
    """Found by an attack: an operator's cancel while the approved call is being made
    (counted upstream, its answer slow) answered the task at once "outcome never
    recorded", then changed it when the worker recorded the result. The task stays
    ``working`` until the worker records it, and then completes once, with it."""
    stack, first, second = two
    bank.stop()
    bank.start(slow=4)
    ann = issuer.token("ann")
    created = held_task(first, ann, {"to": "val", "amount": 22})
    assert created.meta is not None
    run_id = str(created.meta["io.airlock/run"])
    webhook_decide(first, stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60))
    wait_for("the upstream transfer", lambda: transfers(bank), 60)
    stack.service.cancel(run_id, by=Principal.operator("ops"))
    awaited = poll(second, ann, created.task_id)
    assert awaited.status == "working", awaited
    assert "awaiting its outcome" in (awaited.status_message or "")

    def completed() -> DetailedTask | None:
        found = poll(first, ann, created.task_id)
        return found if found.status == "completed" else None

    done = wait_for("the worker to record the call's outcome", completed, 60)
    assert done.result is not None and done.result["isError"] is False
    assert done.result["content"] == [{"type": "text", "text": "sent 22 EUR to val"}]
    assert poll(second, ann, created.task_id).result == done.result  # final
    assert stack.run(run_id).status is RunStatus.CANCELLED
    assert transfers(bank) == {f"transfer {run_id}:mcp_call": 1}
