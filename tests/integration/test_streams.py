"""The live event stream against a real API process (uvicorn, ``airlock api``), a real
worker on Redis and PostgreSQL: a client follows a run, goes away in the middle of
its resumed segment, comes back with ``Last-Event-ID`` and has every event exactly
once through ``completed``; and the inbox's run page, in a real Chromium, shows the
run complete from the stream, without reloading."""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from airlock.persistence.domain import RunStatus
from airlock.workers.testing import SECRET, TOKEN, Stack
from tests.integration.conftest import StackFactory
from tests.integration.test_inbox_browser import browser  # noqa: F401 - the fixture
from tests.sse import Frame, frames

pytestmark = pytest.mark.integration

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(make_stack: StackFactory, postgres_url: str, shared_redis: str) -> Iterator[Any]:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_WEBHOOK_SECRET=SECRET,
        AIRLOCK_API_TOKEN=TOKEN,
    )
    base = stack.api()
    stack.worker()
    yield stack, base


def approve(base: str, run: dict[str, Any]) -> None:
    body = json.dumps({"turn_digest": run["pending"]["turn_digest"], "decision": "approve"})
    webhook_id, now = f"msg_{uuid.uuid4().hex}", datetime.now(UTC)
    headers = {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(webhook_id, now, body),
        "content-type": "application/json",
    }
    answer = httpx.post(f"{base}/v1/runs/{run['id']}/approval", content=body, headers=headers)
    assert answer.status_code == 202, answer.text


def waiting(stack: Stack, base: str, agent: str) -> dict[str, Any]:
    created = httpx.post(f"{base}/v1/runs", json={"agent": agent, "input": "mail 42"}, headers=AUTH)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL)
    view: dict[str, Any] = httpx.get(f"{base}/v1/runs/{run_id}", headers=AUTH).json()
    return view


def read_until(reader: Iterator[Frame], kind: str) -> list[Frame]:
    seen = []
    for frame in reader:
        seen.append(frame)
        if frame.event == "message" and frame.data["kind"] == kind:
            return seen
    raise AssertionError(f"the stream ended before a {kind} event: {seen}")


def test_a_client_that_reconnects_mid_run_gets_every_event_once(served: Any) -> None:
    stack, base = served
    run = waiting(stack, base, "slow_write")  # its approved write takes 4 s
    url = f"{base}/v1/runs/{run['id']}/events/stream"
    timeout = httpx.Timeout(30.0)
    with httpx.stream("GET", url, headers=AUTH, timeout=timeout) as live:
        assert live.status_code == 200
        assert live.headers["content-type"].startswith("text/event-stream")
        reader = frames(live.iter_lines())
        seen = read_until(reader, "suspended")
        approve(base, run)
        seen += read_until(reader, "resumed")  # the worker is in the middle of the write
    assert stack.run(run["id"]).status is RunStatus.RUNNING  # gone while the run goes on
    last = seen[-1].id
    assert last is not None
    with httpx.stream(
        "GET", url, headers={**AUTH, "Last-Event-ID": last}, timeout=timeout
    ) as again:
        rest = list(frames(again.iter_lines()))  # to its end: the server closes it
    events = httpx.get(f"{base}/v1/runs/{run['id']}/events", headers=AUTH).json()["events"]
    got = [f for f in seen + rest if f.event == "message"]
    assert [f.data for f in got] == events
    assert [int(f.id or 0) for f in got] == list(range(1, len(events) + 1))
    assert events[-1]["kind"] == "completed"
    assert rest[-1] == Frame("end", None, {"status": "completed", "last_seq": len(events)})
    assert stack.executions()[f"send_email {run['id']}:call_1_0"] == 1


@pytest.mark.browser
def test_the_run_page_shows_the_run_complete_from_the_stream(
    served: Any,
    browser: Any,  # noqa: F811 - the fixture
) -> None:
    stack, base = served
    run = waiting(stack, base, "w1")
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/inbox/login")
    page.get_by_label("Your name").fill("ann")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/inbox")
    page.goto(f"{base}/inbox/runs/{run['id']}")
    loads: list[str] = []
    page.on("load", lambda _: loads.append(page.url))
    page.evaluate("window.kept = 'this document'")  # gone if the page reloads
    approve(base, run)  # decided elsewhere (a webhook): the page follows by itself
    page.locator("#run-status", has_text="completed").wait_for(timeout=20_000)
    assert page.evaluate("window.kept") == "this document" and loads == []
    assert "done" in page.locator("main").inner_text()  # the run's output
    assert page.locator("#decide").count() == 0
    context.close()


def test_the_api_stops_while_streams_are_open(served: Any) -> None:
    """uvicorn waits for every response to end before it stops, and a stream does not end
    by itself: ``airlock api`` gives them a grace period, then cuts them (their clients
    resume elsewhere from their last event id); the process exits cleanly."""
    stack, base = served
    run = waiting(stack, base, "w1")
    api = next(p for p in stack.processes if p.name == "api")
    url = f"{base}/v1/runs/{run['id']}/events/stream"
    with httpx.stream("GET", url, headers=AUTH, timeout=httpx.Timeout(60.0)) as live:
        reader = frames(live.iter_lines())
        read_until(reader, "suspended")
        os.killpg(api.pid, signal.SIGTERM)
        with pytest.raises(httpx.RemoteProtocolError):  # cut, as a client sees a crash
            next(reader)
    assert api.proc is not None
    assert api.proc.wait(60) == -signal.SIGTERM  # uvicorn re-raises the signal it handled
    assert "Cancel 1 running task(s)" in api.output()
    assert "Finished server process" in api.output()
