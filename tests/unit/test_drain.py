"""How a refused request's body is read and thrown away before the answer
(``airlock.workers.http.guard.drain``, issue 27 defect 4), and where that stops: past a number of
bytes, or a time, the answer closes the connection instead."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.datastructures import Headers
from starlette.types import Message

from airlock.workers.http.guard import Read, drain, refuse
from airlock.workers.http.problems import ProblemError


def _messages(sizes: list[int], *, ends: bool = True) -> Any:
    """``receive`` of a body in parts of ``sizes`` bytes (the last one ends it when
    ``ends``), then one that never comes."""
    parts: list[Message] = [
        {"type": "http.request", "body": b"x" * n, "more_body": not (ends and i == len(sizes) - 1)}
        for i, n in enumerate(sizes)
    ]
    taken: list[Message] = []

    async def receive() -> Message:
        if parts:
            taken.append(parts.pop(0))
            return taken[-1]
        await asyncio.Event().wait()  # a client that sends nothing more
        raise AssertionError("unreachable")

    receive.taken = taken  # type: ignore[attr-defined]
    return receive


def test_drain_reads_a_body_to_its_end() -> None:
    receive = _messages([1000] * 5)
    assert asyncio.run(drain(receive, limit=10_000, seconds=30)) is True
    assert len(receive.taken) == 5


def test_drain_stops_past_its_limit_of_bytes() -> None:
    receive = _messages([1000] * 50)
    assert asyncio.run(drain(receive, limit=2500, seconds=30)) is False
    assert len(receive.taken) == 3  # 3000 bytes > 2500: no more is read


def test_drain_stops_when_the_body_does_not_end_in_time() -> None:
    receive = _messages([1000], ends=False)  # one part, then nothing, ever
    assert asyncio.run(drain(receive, limit=10_000, seconds=0.01)) is False


def test_drain_stops_when_the_client_goes_away() -> None:
    async def receive() -> Message:
        return {"type": "http.disconnect"}

    assert asyncio.run(drain(receive, limit=10, seconds=30)) is True


def test_a_refusal_past_the_drain_bound_closes_the_connection() -> None:
    problem = ProblemError(413, "Body too large", "the limit is 1 bytes")
    headers = Headers(raw=[])
    past = _messages([1000] * 50)
    response = asyncio.run(refuse(problem, headers, past, Read.NOTHING, limit=2500))
    assert response.headers["connection"] == "close"
    within = _messages([1000] * 2)
    kept = asyncio.run(refuse(problem, headers, within, Read.NOTHING, limit=2500))
    assert "connection" not in kept.headers
    assert len(within.taken) == 2


def test_a_refusal_after_the_last_part_reads_no_more() -> None:
    problem = ProblemError(413, "Body too large", "the limit is 1 bytes")
    nothing_more = _messages([])
    response = asyncio.run(refuse(problem, Headers(raw=[]), nothing_more, Read.ALL, seconds=30))
    assert "connection" not in response.headers
    assert nothing_more.taken == []
