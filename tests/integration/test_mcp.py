"""MCP tools in agents, end to end: a real MCP server (the SDK's ``MCPServer``, in its own
process, over Streamable HTTP or stdio) and a real ``celery worker`` running the agents of
``tests.integration.mcp_agents``. The server counts each call it runs (``$BANK_LOG``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airlock.persistence.domain import RunStatus
from airlock.workers.mcp import tools
from airlock.workers.service import settings as settings_module
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.testing import Process, Stack, airlock_env, free_port, wait_for
from tests.integration.conftest import StackFactory

pytestmark = pytest.mark.integration
OPERATOR = Principal.trusted("test")
DRIFTED = 'Error: tool "bank__transfer" changed upstream since it was pinned; not executed.'


class Bank:
    """The test's MCP server: started, restarted as another variant, and its counts."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.log = tmp / "bank.log"
        self.log.touch()
        self.process: Process | None = None

    def start(
        self, variant: str = "1", *, hang: bool = False, hostile: bool = False, slow: float = 0
    ) -> None:
        env = {"PATH": "/usr/bin:/bin", "BANK_LOG": str(self.log), "BANK_VARIANT": variant}
        if hang:
            env["BANK_HANG_ONCE"] = "1"
        if slow:
            env["BANK_SLOW"] = str(slow)
        if hostile:
            env["BANK_HOSTILE"] = "1"
        argv = [sys.executable, "-m", "tests.integration.mcp_server", "http", str(self.port)]
        self.process = Process("bank", argv, env | _pythonpath(), self.tmp / "bank.out").start()
        wait_for("the MCP server", lambda: "Uvicorn running" in self.process_output(), 30)

    def process_output(self) -> str:
        return self.process.output() if self.process else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def calls(self) -> Counter[str]:
        return Counter(self.log.read_text().splitlines())

    def servers_file(self, *, stdio: bool = False) -> Path:
        path = self.tmp / "servers.toml"
        root = _pythonpath()["PYTHONPATH"]
        transport = (
            f'command = ["{sys.executable}", "-m", "tests.integration.mcp_server", "stdio"]\n'
            f'env = {{ BANK_LOG = "${{BANK_LOG}}", PYTHONPATH = "{root}" }}\n'
            if stdio
            else f'url = "http://127.0.0.1:{self.port}/mcp"\n'
            'headers = { Authorization = "Bearer ${BANK_TOKEN}" }\n'
        )
        path.write_text(
            "[servers.bank]\n" + transport + "timeout = 10\n\n[servers.bank.tools]\n"
            'balance = { effect = "read" }\nstatement = { effect = "read" }\n'
            'hologram = { effect = "read" }\n'
            'deposit = { effect = "idempotent_write" }\naudit = { effect = "write" }\n'
        )
        return path


def _pythonpath() -> dict[str, str]:
    from airlock.workers.testing import ROOT

    return {"PYTHONPATH": str(ROOT)}


@pytest.fixture
def bank(tmp_path: Path) -> Iterator[Bank]:
    server = Bank(tmp_path)
    server.start()
    yield server
    server.stop()


McpStack = Callable[..., Stack]


@pytest.fixture
def mcp_stack(
    make_stack: StackFactory,
    postgres_url: str,
    shared_redis: str,
    bank: Bank,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[McpStack]:
    """A stack whose agents are ``mcp_agents``: the test process imports them too (its
    service decides), so its own settings name the servers file and the database."""

    def make(*, stdio: bool = False, **config: str) -> Stack:
        env = {
            "AIRLOCK_DATABASE_URL": postgres_url,
            "AIRLOCK_BROKER_URL": shared_redis,
            "AIRLOCK_AGENTS": "tests.integration.mcp_agents:AGENTS",
            "AIRLOCK_MCP_SERVERS": str(bank.servers_file(stdio=stdio)),
            "BANK_TOKEN": "t0ken",
            "BANK_LOG": str(bank.log),
            **config,
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        _forget()
        return make_stack(**{k: v for k, v in env.items() if k.startswith("AIRLOCK_")})

    yield make
    _forget()


def _forget() -> None:
    """This process's MCP settings and agents, made anew by the next stack."""
    settings_module.settings.cache_clear()
    tools.servers.cache_clear()
    sys.modules.pop("tests.integration.mcp_agents", None)


def approve(stack: Stack, run_id: str, decision: str = "approve") -> None:
    run = stack.run(run_id)
    assert run.turn_digest is not None
    body = DecisionBody(turn_digest=run.turn_digest, decision=decision, approver="ann")
    stack.service.record_decision(run_id, body, OPERATOR)


def key(run_id: str) -> str:
    return f"{run_id}:call_0_0"


def tool_result(stack: Stack, run_id: str) -> str:
    found = [e.payload for e in stack.service.store.events.read(run_id) if e.kind == "tool"]
    assert len(found) == 1, found
    return str(found[0]["result"])


POOLS = pytest.mark.parametrize("airlock", [False, True], ids=["prefork", "airlock-worker"])


@POOLS
def test_a_read_runs_unattended_and_a_write_waits_then_runs_once(
    mcp_stack: McpStack, bank: Bank, airlock: bool
) -> None:
    stack = mcp_stack()
    stack.worker(airlock=airlock)
    read, _ = stack.service.start_run("mcp_balance", "how much?")
    done = stack.wait_status(read.id, RunStatus.COMPLETED)
    assert done.output == "done"
    assert tool_result(stack, read.id) == "acc-1: 100 EUR"
    assert bank.calls()[f"balance {key(read.id)}"] == 1

    write, _ = stack.service.start_run("mcp_transfer", "pay bob")
    waiting = stack.wait_status(write.id, RunStatus.WAITING_FOR_APPROVAL)
    assert waiting.turn_digest
    assert bank.calls()[f"transfer {key(write.id)}"] == 0
    approve(stack, write.id)
    stack.wait_status(write.id, RunStatus.COMPLETED)
    assert tool_result(stack, write.id) == "sent 5 EUR to bob"
    assert bank.calls()[f"transfer {key(write.id)}"] == 1  # the idempotency key in _meta


def test_a_denied_call_never_reaches_the_server_and_a_declared_write_asks(
    mcp_stack: McpStack, bank: Bank
) -> None:
    stack = mcp_stack()
    stack.worker()
    run, _ = stack.service.start_run("mcp_audit", "audit")  # annotated read-only
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, run.id, "deny")
    stack.wait_status(run.id, RunStatus.COMPLETED)
    kinds = stack.kinds(run.id)
    assert "decision" in kinds and "tool" not in kinds  # the model was told; nothing ran
    assert bank.calls()[f"audit {key(run.id)}"] == 0


def test_an_upstream_error_huge_result_and_picture_reach_the_model(
    mcp_stack: McpStack, bank: Bank
) -> None:
    stack = mcp_stack()
    stack.worker()
    refused, _ = stack.service.start_run("mcp_refuse", "try")
    stack.wait_status(refused.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, refused.id)
    stack.wait_status(refused.id, RunStatus.COMPLETED)  # the run goes on: the model is told
    assert tool_result(stack, refused.id).startswith('Error: tool "bank__refuse" failed: ')
    big, _ = stack.service.start_run("mcp_statement", "statement")
    stack.wait_status(big.id, RunStatus.COMPLETED)
    result = tool_result(stack, big.id)
    assert "[cut: the result had 200000 characters" in result
    assert result.endswith(
        "[image image/png, 8 characters of data; kept in the run's events, not shown]"
    )
    odd, _ = stack.service.start_run("mcp_hologram", "show me")
    stack.wait_status(odd.id, RunStatus.COMPLETED)  # a content type MCP does not have
    assert tool_result(stack, odd.id) == (
        "Error: tool \"bank__hologram\" failed: MCP server 'bank' answered tools/call of "
        "'hologram' with a malformed result. It may have run upstream."
    )
    kept = [e.payload for e in stack.service.store.events.read(big.id) if e.kind == "mcp_content"]
    assert kept[0]["content"] == [{"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}]


def test_drift_before_the_call_refuses_until_pinned(mcp_stack: McpStack, bank: Bank) -> None:
    stack = mcp_stack()  # imports (and pins) variant 1
    bank.stop()
    bank.start("2")
    stack.worker()
    run, _ = stack.service.start_run("mcp_transfer", "pay bob")
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, run.id)
    stack.wait_status(run.id, RunStatus.COMPLETED)
    assert tool_result(stack, run.id) == DRIFTED
    assert bank.calls()[f"transfer {key(run.id)}"] == 0
    drift = [e.payload for e in stack.service.store.events.read(run.id) if e.kind == "mcp_drift"]
    assert drift and drift[0]["name"] == "bank__transfer" and drift[0]["against"] == "review"

    config = tools.servers().get("bank")
    assert stack.service.mcp().pin(config, "transfer") == ["bank__transfer"]
    again, _ = stack.service.start_run("mcp_transfer", "pay bob")
    stack.wait_status(again.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, again.id)
    stack.wait_status(again.id, RunStatus.COMPLETED)
    assert tool_result(stack, again.id) == "sent 5 EUR to bob"
    assert bank.calls()[f"transfer {key(again.id)}"] == 1


def test_drift_between_suspension_and_resume_refuses_even_once_pinned(
    mcp_stack: McpStack, bank: Bank
) -> None:
    stack = mcp_stack()
    stack.worker()
    run, _ = stack.service.start_run("mcp_transfer", "pay bob")
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    bank.stop()
    bank.start("2")
    stack.service.mcp().pin(tools.servers().get("bank"))  # the operator accepts it meanwhile
    approve(stack, run.id)
    stack.wait_status(run.id, RunStatus.COMPLETED)
    assert tool_result(stack, run.id) == DRIFTED  # it was reviewed against the old one
    assert bank.calls()[f"transfer {key(run.id)}"] == 0
    drift = [e.payload for e in stack.service.store.events.read(run.id) if e.kind == "mcp_drift"]
    assert drift[0]["against"] == "review"


KILLED = {
    "write": ("mcp_transfer", "transfer", RunStatus.FAILED, 1),  # in doubt: not sent again
    "idempotent_write": ("mcp_deposit", "deposit", RunStatus.COMPLETED, 2),  # the same key
}


@pytest.mark.parametrize("effect", list(KILLED))
def test_a_worker_killed_after_the_upstream_call(
    mcp_stack: McpStack, bank: Bank, effect: str
) -> None:
    agent, tool, ends, sent = KILLED[effect]
    bank.stop()
    bank.start(hang=True)  # the first call of each key runs upstream, then never answers
    stack = mcp_stack()
    worker = stack.worker()
    stack.beat()
    run, _ = stack.service.start_run(agent, "go")
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, run.id)
    wait_for("the upstream call", lambda: bank.calls()[f"{tool} {key(run.id)}"])
    worker.kill()  # after the call ran upstream, before its result was recorded
    stack.worker()
    finished = stack.wait_status(run.id, ends, timeout=60)
    assert bank.calls()[f"{tool} {key(run.id)}"] == sent
    if ends is RunStatus.FAILED:
        assert "started but its outcome was never recorded" in (finished.error or "")


def test_a_stdio_server_read_and_approved_write(mcp_stack: McpStack, bank: Bank) -> None:
    stack = mcp_stack(stdio=True)  # each process starts its own server, all count in one log
    stack.worker()  # prefork: see docs/mcp.md for stdio under the gevent pool
    read, _ = stack.service.start_run("mcp_balance", "how much?")
    stack.wait_status(read.id, RunStatus.COMPLETED)
    assert tool_result(stack, read.id) == "acc-1: 100 EUR"
    write, _ = stack.service.start_run("mcp_transfer", "pay bob")
    stack.wait_status(write.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, write.id)
    stack.wait_status(write.id, RunStatus.COMPLETED)
    assert tool_result(stack, write.id) == "sent 5 EUR to bob"
    assert bank.calls()[f"transfer {key(write.id)}"] == 1


def test_a_server_down_when_the_worker_starts_fails_only_the_calls_that_need_it(
    mcp_stack: McpStack, bank: Bank
) -> None:
    stack = mcp_stack()  # the test's import pins the tools
    bank.stop()
    worker = stack.worker()  # starts, offering the pinned tools
    assert worker.alive
    down, _ = stack.service.start_run("mcp_balance", "how much?")
    stack.wait_status(down.id, RunStatus.COMPLETED, timeout=60)
    told = tool_result(stack, down.id)
    assert told.startswith("Error: tool \"bank__balance\" was not executed: MCP server 'bank'")
    bank.start()
    up, _ = stack.service.start_run("mcp_balance", "how much?")
    stack.wait_status(up.id, RunStatus.COMPLETED)
    assert tool_result(stack, up.id) == "acc-1: 100 EUR"  # a new session, once it answers


def test_a_hostile_server_s_bad_tools_are_left_out_and_the_rest_offered(
    mcp_stack: McpStack, bank: Bank, caplog: pytest.LogCaptureFixture
) -> None:
    bank.stop()
    bank.start(hostile=True)
    stack = mcp_stack()
    offered = {t.name for t in tools.mcp_tools("bank")}
    assert "bank__balance" in offered and "bank__transfer" in offered
    assert not {n for n in offered if "two" in n or "space" in n or "typeless" in n}
    refused = " ".join(r.getMessage() for r in caplog.records)
    assert "'two__parts'" in refused and "'has space'" in refused
    assert "12 is not valid under any of the given schemas" in refused  # typeless's schema
    stack.worker()
    run, _ = stack.service.start_run("mcp_balance", "how much?")
    stack.wait_status(run.id, RunStatus.COMPLETED)
    assert tool_result(stack, run.id) == "acc-1: 100 EUR"


def test_airlock_mcp_list_and_pin(mcp_stack: McpStack, bank: Bank) -> None:
    stack = mcp_stack()
    env = airlock_env(stack.config, stack.outbox) | {"BANK_TOKEN": "t0ken"}

    def airlock(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "airlock.workers", *args]
        return subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    listed = json.loads(airlock("mcp", "list", "--json").stdout)
    by_name = {t["name"]: t for t in listed["servers"][0]["tools"]}
    assert by_name["bank__transfer"]["drift"] == "pinned"
    assert by_name["bank__transfer"]["effect"] == "write"
    assert by_name["bank__balance"]["effect"] == "read"
    assert by_name["bank__audit"]["effect"] == "write"  # annotated read-only, declared write
    bank.stop()
    bank.start("2")
    listed = json.loads(airlock("mcp", "list", "--json").stdout)
    drifted = {t["name"]: t["drift"] for t in listed["servers"][0]["tools"]}
    assert drifted["bank__transfer"] == "drifted" and drifted["bank__balance"] == "pinned"
    missing = airlock("mcp", "pin", "bank", "nope")
    assert missing.returncode == 2 and "lists no tool 'nope'" in missing.stderr
    pinned = airlock("mcp", "pin", "bank", "transfer")
    assert pinned.returncode == 0 and "pinned bank__transfer" in pinned.stdout
    listed = json.loads(airlock("mcp", "list", "--json").stdout)
    assert {t["drift"] for t in listed["servers"][0]["tools"]} == {"pinned"}


def test_a_stdio_server_under_the_gevent_pool_is_refused_clearly(
    mcp_stack: McpStack, bank: Bank
) -> None:
    stack = mcp_stack(stdio=True)
    stack.worker(airlock=True)  # on Redis: -P gevent
    run, _ = stack.service.start_run("mcp_balance", "how much?")
    # 60 s: on a loaded machine this worker's first task once started 30 s after it came
    stack.wait_status(run.id, RunStatus.COMPLETED, timeout=60)
    told = tool_result(stack, run.id)
    assert "is a stdio server, which a gevent worker cannot start" in told
    assert bank.calls()[f"balance {key(run.id)}"] == 0
