"""W1 on the peer: LangGraph with its PostgreSQL checkpointer (PostgresSaver, durability
"sync"), one process, the same PostgreSQL. Run by bench.approval_path inside the peer's
own virtualenv (bench/peer/requirements.txt); it imports nothing of Airlock.

    python bench/peer/langgraph_w1.py POSTGRES_URL N

W1 as in bench/agents.py: a scripted model asks for a read tool (``lookup``), then a
write (``send_email``) that waits for a human (``interrupt``), then answers. Each run is
a new thread: invoke until it waits (create), then resume it with an approval
(``Command(resume=...)``) until it is done. Prints one JSON object: per-run seconds of
create → done and approve → done, and the wall time of all N, after a warm-up.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

SCRIPT = [
    [{"name": "lookup", "args": {"q": "42"}}],
    [{"name": "send_email", "args": {"to": "a@example.com"}}],
    None,
]


def model(state: MessagesState) -> dict[str, Any]:
    turn = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
    calls = SCRIPT[turn]
    if calls is None:
        return {"messages": [AIMessage(content="done")]}
    return {
        "messages": [
            AIMessage(
                content="",
                tool_calls=[{**c, "id": f"call_{uuid.uuid4().hex[:12]}"} for c in calls],
            )
        ]
    }


def tools(state: MessagesState) -> dict[str, Any]:
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


def build(saver: PostgresSaver) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


def one(app: Any) -> tuple[float, float]:
    config = {"configurable": {"thread_id": uuid.uuid4().hex}}
    start = time.perf_counter()
    waiting = app.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    assert waiting.get("__interrupt__"), waiting
    approved = time.perf_counter()
    done = app.invoke(Command(resume="approve"), config, durability="sync")
    end = time.perf_counter()
    assert done["messages"][-1].content == "done", done
    return end - start, end - approved


def main() -> None:
    url, n = sys.argv[1], int(sys.argv[2])
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        app = build(saver)
        for _ in range(5):
            one(app)  # warm up
        started = time.perf_counter()
        samples = [one(app) for _ in range(n)]
        wall = time.perf_counter() - started
    json.dump(
        {
            "create_to_done": [s[0] for s in samples],
            "approve_to_done": [s[1] for s in samples],
            "wall": wall,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
