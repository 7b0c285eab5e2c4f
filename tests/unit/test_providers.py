"""The provider adapters against a local HTTP server that plays each API (no network)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from airlock.loop import (
    Agent,
    ApprovalRequired,
    Approve,
    Deny,
    ModelError,
    Termination,
    ToolLoop,
    ToolResultMessage,
    Usage,
)
from airlock.providers import AnthropicModel, OpenAIModel
from tests.unit.agents import Recorder


class Recorded:
    def __init__(
        self, path: str, headers: dict[str, str], body: dict[str, Any], peer: tuple[str, int]
    ) -> None:
        self.path = path
        self.headers = headers
        self.body = body
        self.peer = peer
        """The client's address: the same for calls on one kept-alive connection."""


class FakeProvider(ThreadingHTTPServer):
    """Answers each POST with the next scripted (status, body, headers) and records it."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Recorded] = []
        self.replies: list[tuple[int, Any, dict[str, str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reply(self, body: Any, status: int = 200, **headers: str) -> None:
        self.replies.append((status, body, headers))


class _Handler(BaseHTTPRequestHandler):
    server: FakeProvider
    protocol_version = "HTTP/1.1"  # keeps connections alive, as providers do

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["content-length"]))
        self.server.requests.append(
            Recorded(
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                json.loads(raw),
                self.client_address,
            )
        )
        status, body, headers = self.server.replies.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        for key, value in headers.items():
            self.send_header(key.replace("_", "-"), value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider()
    # a short poll: shutdown() waits for the server's next look (0.5 s by default)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def mailer(model: Any, rec: Recorder) -> Agent:
    tools = [t for t in rec.tools() if t.name in ("lookup", "send_email")]
    return Agent(name="mailer", model=model, tools=tools, instructions="Be careful.")


# -- OpenAI-compatible ------------------------------------------------------------------


def openai_turn(calls: list[tuple[str, str, str]] | None = None, content: str | None = None,
                usage: tuple[int, int] = (10, 2)) -> dict[str, Any]:  # fmt: skip
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return {
        "choices": [{"message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
    }


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_openai_suspends_and_resumes(provider: FakeProvider, decision: str) -> None:
    rec = Recorder()
    model = OpenAIModel(
        model="gpt-test", base_url=f"{provider.url}/v1", api_key="sk-test", temperature=0.2
    )
    agent = mailer(model, rec)
    provider.reply(
        openai_turn([("call_a", "send_email", '{"to": "a@x", "body": "hi"}')], usage=(50, 7))
    )
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop().run(agent, "mail a", run_id="r1")
    first = provider.requests[0]
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.body["model"] == "gpt-test" and first.body["temperature"] == 0.2
    assert first.body["messages"] == [
        {"role": "system", "content": "Be careful."},
        {"role": "user", "content": "mail a"},
    ]
    tool = next(t for t in first.body["tools"] if t["function"]["name"] == "send_email")
    assert tool["type"] == "function"
    assert set(tool["function"]["parameters"]["properties"]) == {"to", "body"}

    provider.reply(openai_turn(content="all done", usage=(80, 3)))
    result = ToolLoop().resume(
        agent, info.value.state, Approve() if decision == "approve" else Deny(reason="no")
    )
    resumed = provider.requests[1].body["messages"]
    assert resumed[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {
                    "name": "send_email",
                    "arguments": json.dumps({"to": "a@x", "body": "hi"}),
                },
            }
        ],
    }
    expected = (
        "sent to a@x"
        if decision == "approve"
        else ('Error: tool "send_email" was denied by the operator. Reason: no')
    )
    assert resumed[3] == {"role": "tool", "tool_call_id": "call_a", "content": expected}
    assert result.termination is Termination.COMPLETED and result.output == "all done"
    assert result.usage == Usage(130, 10) and result.iterations == 2
    assert len(rec.calls) == (1 if decision == "approve" else 0)


def test_openai_malformed_arguments_are_fed_back(provider: FakeProvider) -> None:
    rec = Recorder()
    agent = mailer(OpenAIModel(model="m", base_url=provider.url), rec)
    provider.reply(openai_turn([("c1", "send_email", '{"to": "a@x", "body": ')]))
    provider.reply(openai_turn(content="sorry"))
    result = ToolLoop().run(agent, "mail a")
    answer = next(m for m in result.transcript if isinstance(m, ToolResultMessage))
    assert answer.is_error and "not valid JSON" in answer.content
    assert rec.calls == []  # never executed, and no approval was asked for garbage
    assert "authorization" not in provider.requests[0].headers


@pytest.mark.parametrize(
    ("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (401, False),
                              (403, False), (404, False)],
)  # fmt: skip
def test_openai_errors_are_typed(provider: FakeProvider, status: int, retryable: bool) -> None:
    provider.reply({"error": {"message": f"problem {status}"}}, status, retry_after="7")
    model = OpenAIModel(model="m", base_url=provider.url, api_key="k")
    with pytest.raises(ModelError, match=f"answered {status}: problem {status}") as info:
        model.complete([], [])
    assert info.value.retryable is retryable
    assert info.value.retry_after == (7.0 if retryable else None)


def test_calls_share_one_kept_alive_connection(provider: FakeProvider) -> None:
    """One pooled client per process: the second call (even from another model object)
    goes over the first call's connection, with no new handshake."""
    for _ in range(2):
        provider.reply(openai_turn(content="hi"))
    OpenAIModel(model="m", base_url=provider.url, api_key="k").complete([], [])
    OpenAIModel(model="m", base_url=provider.url, api_key="k").complete([], [])
    peers = {r.peer for r in provider.requests}
    assert len(provider.requests) == 2
    assert len(peers) == 1, peers


def test_a_forked_child_makes_its_own_client() -> None:
    from airlock.providers import http

    parent = http.client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a client of its own, not the parent's object
        os.write(write, b"1" if http.client() is not parent else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    assert http.client() is parent


def test_unreachable_provider_is_retryable() -> None:
    model = OpenAIModel(model="m", base_url="http://127.0.0.1:9", timeout=2)
    with pytest.raises(ModelError, match="could not reach") as info:
        model.complete([], [])
    assert info.value.retryable


def test_openai_key_and_url_default_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://example.invalid/v1/")
    model = OpenAIModel(model="m")
    assert (model.api_key, model.base_url) == ("from-env", "http://example.invalid/v1")


# -- Anthropic ----------------------------------------------------------------------------


def anthropic_turn(
    blocks: list[dict[str, Any]], usage: tuple[int, int] = (10, 2)
) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": blocks,
        "stop_reason": "tool_use",
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_anthropic_suspends_and_resumes(provider: FakeProvider, decision: str) -> None:
    rec = Recorder()
    model = AnthropicModel(model="claude-test", base_url=provider.url, api_key="ak", max_tokens=300)
    agent = mailer(model, rec)
    provider.reply(
        anthropic_turn(
            [
                {"type": "text", "text": "Looking up, then mailing."},
                {"type": "tool_use", "id": "tu_1", "name": "lookup", "input": {"q": "a"}},
                {
                    "type": "tool_use",
                    "id": "tu_2",
                    "name": "send_email",
                    "input": {"to": "a@x", "body": "hi"},
                },
            ],
            usage=(40, 9),
        )
    )
    with pytest.raises(ApprovalRequired) as info:
        ToolLoop().run(agent, "mail a")
    first = provider.requests[0]
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "ak" and first.headers["anthropic-version"] == "2023-06-01"
    assert first.body["system"] == "Be careful." and first.body["max_tokens"] == 300
    assert first.body["messages"] == [{"role": "user", "content": "mail a"}]
    tool = next(t for t in first.body["tools"] if t["name"] == "send_email")
    assert set(tool["input_schema"]["properties"]) == {"to", "body"}

    provider.reply(anthropic_turn([{"type": "text", "text": "done"}], usage=(70, 2)))
    result = ToolLoop().resume(
        agent, info.value.state, Approve() if decision == "approve" else Deny(reason="no")
    )
    messages = provider.requests[1].body["messages"]
    assert messages[1]["role"] == "assistant"
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    # both tool results merged into one user turn; the denied one flagged is_error
    assert messages[2]["role"] == "user" and len(messages) == 3
    results = messages[2]["content"]
    assert [r["tool_use_id"] for r in results] == ["tu_1", "tu_2"]
    if decision == "approve":
        assert "is_error" not in results[1] and results[1]["content"] == "sent to a@x"
    else:
        assert results[1]["is_error"] is True and "denied by the operator" in results[1]["content"]
        assert results[0]["is_error"] is True  # a whole-turn Deny denies the read too
    assert result.usage == Usage(110, 11) and result.output == "done"


@pytest.mark.parametrize(("status", "retryable"), [(529, True), (429, True), (400, False)])
def test_anthropic_errors_are_typed(provider: FakeProvider, status: int, retryable: bool) -> None:
    provider.reply({"type": "error", "error": {"type": "x", "message": "nope"}}, status)
    with pytest.raises(ModelError, match="nope") as info:
        AnthropicModel(model="m", base_url=provider.url).complete([], [])
    assert info.value.retryable is retryable


def test_unexpected_response_shape_is_a_clear_error(provider: FakeProvider) -> None:
    provider.reply({"choices": []})
    with pytest.raises(ModelError, match="unexpected Chat Completions response"):
        OpenAIModel(model="m", base_url=provider.url).complete([], [])
