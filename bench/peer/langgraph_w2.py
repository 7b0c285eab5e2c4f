"""W2 on the peer: LangGraph with its asynchronous PostgreSQL checkpointer
(``AsyncPostgresSaver`` on a psycopg ``AsyncConnectionPool``, durability "sync"), one
process on asyncio, the model called over HTTP with one ``httpx.AsyncClient`` (kept
connections, as many as calls in flight) on the same fake server as Airlock's
``OpenAIModel`` (``bench.fake_openai``). Run by ``bench.w2`` inside the peer's own
virtualenv (bench/peer/requirements.txt); it imports nothing of Airlock.

    python bench/peer/langgraph_w2.py POSTGRES_URL MODEL_URL CLIENTS SECONDS WARMUP [POOL [POLL]]

The clients drive it in the same process (there is no API to call over HTTP): each
client, in a loop, starts a run as a task of its own (the create), reads the thread's
state every 250 ms (POLL) (``aget_state``: a read of the checkpoint, where Airlock's client
sends a GET) until the run waits in ``interrupt()``, resumes it with an approval as a
task of its own, and reads the state every 250 ms until the run is done. Runs go on
for WARMUP + SECONDS; the runs started before the end are finished. Prints one JSON
object: each run's start and end (monotonic seconds), the measured window, the errors.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from typing import Any

import httpx
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

POLL = 0.25
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "send_email",
            "description": "",
            "parameters": {"type": "object", "properties": {"to": {"type": "string"}}},
        },
    },
]
MODEL: dict[str, Any] = {}
"""The model's URL and client, set by main."""


def openai_message(m: BaseMessage) -> dict[str, Any]:
    if isinstance(m, HumanMessage):
        return {"role": "user", "content": m.content}
    if isinstance(m, ToolMessage):
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    assert isinstance(m, AIMessage)
    out: dict[str, Any] = {"role": "assistant", "content": m.content or None}
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
            }
            for c in m.tool_calls
        ]
    return out


async def model(state: MessagesState) -> dict[str, Any]:
    body = {
        "model": "fake-w2",
        "messages": [openai_message(m) for m in state["messages"]],
        "tools": TOOLS,
    }
    response = await MODEL["client"].post(
        MODEL["url"], json=body, headers={"authorization": "Bearer fake"}, timeout=60
    )
    response.raise_for_status()
    message = response.json()["choices"][0]["message"]
    calls = [
        {
            "id": c["id"],
            "name": c["function"]["name"],
            "args": json.loads(c["function"]["arguments"] or "{}"),
        }
        for c in message.get("tool_calls") or ()
    ]
    return {"messages": [AIMessage(content=message.get("content") or "", tool_calls=calls)]}


async def tools(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    out = []
    for call in last.tool_calls:
        if call["name"] == "send_email":
            decision = interrupt({"tool": call["name"], "arguments": call["args"]})
            result = call["args"]["to"] if decision == "approve" else "denied"
        else:
            result = call["args"]["q"]
        out.append(ToolMessage(content=result, tool_call_id=call["id"]))
    return {"messages": out}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def build(saver: AsyncPostgresSaver) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


async def poll_until(app: Any, config: dict[str, Any], done: Any) -> None:
    while True:
        await asyncio.sleep(POLL)
        if done(await app.aget_state(config)):
            return


def waiting(state: Any) -> bool:
    return bool(state.interrupts)


def completed(state: Any) -> bool:
    messages = state.values.get("messages", [])
    return not state.next and bool(messages) and str(messages[-1].content).startswith("done")


async def one(app: Any) -> tuple[float, float]:
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    start = time.monotonic()
    created = asyncio.create_task(
        app.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    )
    await poll_until(app, config, waiting)
    await created
    resumed = asyncio.create_task(app.ainvoke(Command(resume="approve"), config, durability="sync"))
    await poll_until(app, config, completed)
    await resumed
    return start, time.monotonic()


async def client(
    app: Any, until: float, runs: list[tuple[float, float]], errors: list[str]
) -> None:
    while time.monotonic() < until:
        try:
            runs.append(await one(app))
        except Exception as exc:  # counted and shown, never hidden
            errors.append(repr(exc))
            await asyncio.sleep(POLL)


async def main() -> None:
    url, model_url = sys.argv[1], sys.argv[2]
    clients, seconds, warmup = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    pool_size = int(sys.argv[6]) if len(sys.argv) > 6 else 20
    global POLL  # noqa: PLW0603 - the clients' poll, as bench.w2's
    POLL = float(sys.argv[7]) if len(sys.argv) > 7 else POLL
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=60)
    async with (
        httpx.AsyncClient(limits=limits) as http,
        AsyncConnectionPool(
            url,
            min_size=pool_size,
            max_size=pool_size,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        ) as pool,
    ):
        MODEL.update(url=f"{model_url}/chat/completions", client=http)
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        app = build(saver)
        await one(app)  # the first run pays the imports' and connections' set-up
        runs: list[tuple[float, float]] = []
        errors: list[str] = []
        print("clients", file=sys.stderr, flush=True)  # bench.w2 measures from here
        begin = time.monotonic()
        until = begin + warmup + seconds
        # the runs in flight at the end are finished, within two minutes
        clients_done = asyncio.gather(*(client(app, until, runs, errors) for _ in range(clients)))
        await asyncio.wait_for(clients_done, timeout=warmup + seconds + 120)
    json.dump(
        {
            "runs": runs,
            "window": [begin + warmup, until],
            "errors": errors[:20],
            "error_count": len(errors),
            "pool_size": pool_size,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    asyncio.run(main())
