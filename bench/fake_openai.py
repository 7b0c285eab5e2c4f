"""A fake OpenAI-compatible model for W2: a real HTTP/1.1 server in a process of its own
(uvicorn, keep-alive), ``POST /v1/chat/completions`` answered after a fixed latency
(``asyncio.sleep``: hundreds of calls wait at once), in OpenAI's ``tool_calls`` format.

    .venv/bin/python -m bench.fake_openai --port 8900 --latency 0.5

The turn is decided by the tool results the request carries, never by a counter of
its own (a retried or resumed call gets the same answer), W1's script:

1. no tool result yet: call the read tool ``lookup`` (``{"q": "42"}``);
2. ``lookup``'s result, none of ``send_email``'s: call the gated write ``send_email``
   (``{"to": "a@example.com"}``);
3. ``send_email``'s result (its output, or the denial fed back): answer ``done: …``.

A result's tool is found through its ``tool_call_id`` in the assistant's calls before
it. ``GET /stats`` counts the calls answered, in flight now and at most at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

READ = "lookup"
WRITE = "send_email"
READ_ARGUMENTS = {"q": "42"}
WRITE_ARGUMENTS = {"to": "a@example.com"}


def results_by_tool(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The content of each tool's latest result in ``messages`` (OpenAI's chat format),
    by the tool's name, found through the call id the result answers."""
    names: dict[str, str] = {}
    results: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                names[call["id"]] = call["function"]["name"]
        elif message.get("role") == "tool":
            name = names.get(message.get("tool_call_id", ""))
            if name is not None:
                results[name] = str(message.get("content") or "")
    return results


def next_message(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant's message for this turn of W1's script (the module's docstring)."""
    results = results_by_tool(messages)
    if WRITE in results:
        return {"role": "assistant", "content": f"done: {results[WRITE]}"}
    name, arguments = (WRITE, WRITE_ARGUMENTS) if READ in results else (READ, READ_ARGUMENTS)
    call = {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def completion(request: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions response to ``request``."""
    message = next_message(request.get("messages") or [])
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
    }


class Stats:
    def __init__(self) -> None:
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "calls": self.calls,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
        }


def make_app(latency: float) -> Any:
    from starlette.applications import Starlette  # noqa: PLC0415 - the server's process only
    from starlette.requests import Request  # noqa: PLC0415
    from starlette.responses import JSONResponse  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    stats = Stats()

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            await asyncio.sleep(latency)
            answer = completion(body)
        finally:
            stats.in_flight -= 1
        stats.calls += 1
        return JSONResponse(answer)

    async def show(_: Request) -> JSONResponse:
        return JSONResponse(stats.as_dict())

    async def reset(_: Request) -> JSONResponse:
        stats.calls = 0
        stats.max_in_flight = stats.in_flight
        return JSONResponse(stats.as_dict())

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/stats", show, methods=["GET"]),
            Route("/stats/reset", reset, methods=["POST"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per call")
    args = parser.parse_args()
    import uvicorn  # noqa: PLC0415

    uvicorn.run(
        make_app(args.latency),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        backlog=4096,
        # longer than the clients keep an idle connection (the providers' pool: 60 s),
        # so a kept connection is never closed under a request being sent on it
        timeout_keep_alive=120,
    )


if __name__ == "__main__":
    main()
