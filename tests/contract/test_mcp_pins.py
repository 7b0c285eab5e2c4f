"""MCP tools' pins and reviews in the store, on both databases: the first import wins,
however many processes import at once; ``airlock mcp pin`` replaces; a suspended call's
reviewed fingerprint is kept as first recorded."""

from __future__ import annotations

import threading

from pydantic import JsonValue
from sqlalchemy import Engine

from airlock.persistence.store import RunStore


def definition(description: str) -> dict[str, JsonValue]:
    return {"name": "transfer", "description": description, "input_schema": {}}


def test_the_first_import_wins_and_pin_replaces(engine: Engine) -> None:
    store = RunStore(engine)
    store.mcp.record_first("bank", "transfer", "a" * 64, definition("first"))
    store.mcp.record_first("bank", "transfer", "b" * 64, definition("second"))
    pin = store.mcp.pin("bank", "transfer")
    assert pin is not None and pin.fingerprint == "a" * 64
    assert pin.definition["description"] == "first"
    store.mcp.replace("bank", "transfer", "c" * 64, definition("pinned"))
    assert store.mcp.pins("bank")["transfer"].fingerprint == "c" * 64
    assert store.mcp.pins("files") == {} and store.mcp.pin("bank", "nope") is None


def test_concurrent_first_imports_pin_one_definition(engine: Engine) -> None:
    store = RunStore(engine)
    start = threading.Barrier(8)
    errors: list[BaseException] = []

    def imports(n: int) -> None:
        start.wait()  # all at once: each finds no pin, each inserts
        try:
            store.mcp.record_first("bank", "transfer", f"{n:064d}", definition(str(n)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=imports, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    pin = store.mcp.pin("bank", "transfer")
    assert pin is not None and pin.definition["description"] == str(int(pin.fingerprint))


def test_a_review_keeps_its_first_fingerprint(engine: Engine) -> None:
    store = RunStore(engine)
    run, _ = store.runs.create("agent", "input")
    store.mcp.review(run.id, {"call_1": ("bank__transfer", "a" * 64)})
    store.mcp.review(run.id, {"call_1": ("bank__transfer", "b" * 64), "call_2": ("x", "c" * 64)})
    assert store.mcp.reviewed(run.id, "call_1") == "a" * 64
    assert store.mcp.reviewed(run.id, "call_2") == "c" * 64
    assert store.mcp.reviewed(run.id, "call_3") is None
