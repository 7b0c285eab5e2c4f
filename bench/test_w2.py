"""W2's pieces (``bench/fake_openai.py``, ``bench/w2.py``): the fake model, a real server
process on a free port called over HTTP, decides each turn from the tool results the
call carries; and the benchmark's arithmetic. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from airlock.loop.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from airlock.providers import OpenAIModel
from airlock.workers.testing import ROOT, free_port, wait_for
from bench import fake_openai
from bench.w2 import per_run, physical_limit, summarize, warnings
from bench.w2_agents import W2


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.fake_openai", "--port", str(port), "--latency", "0"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(f"{url}/stats", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for("the fake model", answers, timeout=30, interval=0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def chat(url: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    response = httpx.post(
        f"{url}/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=10
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def assistant_call(call_id: str, name: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
        ],
    }


def called(answer: dict[str, Any]) -> list[str]:
    message = answer["choices"][0]["message"]
    return [c["function"]["name"] for c in message.get("tool_calls") or ()]


USER = {"role": "user", "content": "go"}


def test_no_tool_result_yet_asks_the_read_tool(server: str) -> None:
    answer = chat(server, [USER])
    assert called(answer) == ["lookup"]
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    call = answer["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"q": "42"}
    assert call["type"] == "function"
    assert call["id"].startswith("call_")


def test_after_the_read_result_it_asks_the_gated_write(server: str) -> None:
    messages = [
        USER,
        assistant_call("c1", "lookup"),
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    answer = chat(server, messages)
    assert called(answer) == ["send_email"]
    arguments = answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"to": "a@example.com"}


def test_after_the_write_result_it_answers(server: str) -> None:
    messages = [
        USER,
        assistant_call("c1", "lookup"),
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        assistant_call("c2", "send_email"),
        {"role": "tool", "tool_call_id": "c2", "content": "sent"},
    ]
    message = chat(server, messages)["choices"][0]
    assert message["finish_reason"] == "stop"
    assert message["message"] == {"role": "assistant", "content": "done: sent"}


def test_the_turn_follows_the_results_not_the_number_of_messages(server: str) -> None:
    # an assistant turn whose call has no result yet, and a result for a call nobody
    # made: neither counts, so the read tool is asked again
    messages = [
        USER,
        assistant_call("c1", "lookup"),
        {"role": "tool", "tool_call_id": "unknown", "content": "?"},
        {"role": "assistant", "content": "thinking"},
    ]
    assert called(chat(server, messages)) == ["lookup"]
    # the write's result alone (a denial fed back, say) ends the script
    denial = [
        USER,
        assistant_call("w", "send_email"),
        {"role": "tool", "tool_call_id": "w", "content": "denied"},
    ]
    assert chat(server, denial)["choices"][0]["message"]["content"] == "done: denied"


def test_openai_model_follows_the_script_over_http(server: str) -> None:
    """Airlock's provider, as the W2 agent uses it, against the real server."""
    model = OpenAIModel(model="fake-w2", base_url=f"{server}/v1", api_key="fake")
    schemas = [t.schema() for t in W2.tools]
    transcript: list[Message] = [UserMessage("go")]
    names = []
    for _ in range(3):
        message = model.complete(transcript, schemas).message
        transcript.append(message)
        if not message.tool_calls:
            break
        call = message.tool_calls[0]
        names.append(call.name)
        transcript.append(ToolResultMessage(call.id, call.name, f"{call.name} ok"))
    assert names == ["lookup", "send_email"]
    last = transcript[-1]
    assert isinstance(last, AssistantMessage)
    assert last.content == "done: send_email ok"


def test_stats_count_the_calls(server: str) -> None:
    httpx.post(f"{server}/stats/reset", timeout=5)
    chat(server, [USER])
    chat(server, [USER])
    stats = httpx.get(f"{server}/stats", timeout=5).json()
    assert stats["calls"] == 2
    assert stats["in_flight"] == 0
    assert stats["max_in_flight"] >= 1


def test_results_by_tool_takes_each_tools_latest_result() -> None:
    messages = [
        assistant_call("a", "lookup"),
        {"role": "tool", "tool_call_id": "a", "content": "first"},
        assistant_call("b", "lookup"),
        {"role": "tool", "tool_call_id": "b", "content": "second"},
    ]
    assert fake_openai.results_by_tool(messages) == {"lookup": "second"}


def test_the_physical_limit_is_three_model_calls_per_run() -> None:
    assert physical_limit(50, 0.5) == pytest.approx(33.333, abs=0.001)
    assert physical_limit(200, 0.5) == pytest.approx(133.333, abs=0.001)


def test_summarize_counts_the_runs_that_end_in_the_window() -> None:
    runs = [
        (0.0, 2.0),  # ended before the window: warm-up
        (1.0, 3.0),  # ended at its start: counted
        (5.0, 6.5),
        (8.0, 9.0),
        (10.0, 13.0),  # ended at its end: counted
        (11.0, 14.0),  # ended after it: not counted
    ]
    result = summarize(runs, (3.0, 13.0), clients=5, latency=0.5)
    assert result["runs"] == 4
    assert result["runs_per_s"] == 0.4
    # durations 2.0, 1.5, 1.0, 3.0: the median between the middle two
    assert result["run_p50_s"] == 1.75
    assert result["run_p95_s"] == 2.0  # bench.stack.pct: the rank int(0.95 * 3) = 2
    assert result["runs_per_s_little"] == round(5 / 1.875, 2)  # C / the mean run
    assert result["physical_limit"] == 3.33
    assert result["of_limit"] == pytest.approx(0.4 / (5 / 1.5), abs=0.001)


def test_summarize_with_no_run_in_the_window() -> None:
    result = summarize([(0.0, 1.0)], (2.0, 4.0), clients=1, latency=1.0)
    assert result["runs"] == 0
    assert result["runs_per_s"] == 0.0
    assert result["run_p50_s"] is None
    assert result["runs_per_s_little"] == 0.0
    assert result["of_limit"] == 0.0


def test_cpu_per_run_in_milliseconds() -> None:
    assert per_run({"worker": 1.5, "api": 0.25}, 100) == {"worker": 15.0, "api": 2.5}
    assert per_run({"worker": 1.0}, 0) == {"worker": 0.0}


def test_the_worker_logs_warnings_are_counted_by_message() -> None:
    log = "\n".join(
        [
            "[2026-12-05 05:34:35,706: WARNING/MainProcess] lease lost",
            "[2026-12-05 05:34:36,706: INFO/MainProcess] ready.",
            "[2026-12-05 05:34:47,452: WARNING/MainProcess] Task airlock.run_segment.v1"
            "[d296b85d-2841-42cb-80fb-83ea667d7122] cannot be acknowledged",
            "[2026-12-05 05:34:47,453: WARNING/MainProcess] Task airlock.run_segment.v1"
            "[4e133d56-b2ff-4d55-b07f-9757c7d8c8cc] cannot be acknowledged",
            "[2026-12-05 05:34:48,000: ERROR/MainProcess] broken",
            "Terminating it instead.",
        ]
    )
    assert warnings(log) == {
        "lease lost": 1,
        "Task airlock.run_segment.v1[…] cannot be acknowledged": 2,
        "broken": 1,
    }
