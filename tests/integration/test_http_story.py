"""The whole story over HTTP: a real API process, a real worker, and a receiver that
gets the signed notification and answers with a signed approval."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from airlock.workers.testing import SECRET, TOKEN, wait_for
from tests.api.conftest import OLD_SECRET
from tests.integration.conftest import StackFactory

pytestmark = pytest.mark.integration

NOTIFY_SECRET = OLD_SECRET


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.events: list[dict[str, Any]] = []
        self.bad_signatures = 0
        self.api: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        try:
            event = Webhook(NOTIFY_SECRET).verify(body, dict(self.headers))
        except Exception:
            self.server.bad_signatures += 1
            self.send_response(400)
            self.end_headers()
            return
        self.server.events.append(event)
        self.send_response(204)
        self.end_headers()
        if event["type"] == "run.waiting_for_approval":
            threading.Thread(target=approve, args=(self.server.api, event["data"])).start()

    def log_message(self, *args: object) -> None:
        del args


def approve(api: str, run: dict[str, Any]) -> None:
    body = json.dumps(
        {"turn_digest": run["pending"]["turn_digest"], "decision": "approve", "approver": "bot"}
    )
    webhook_id = f"msg_{uuid.uuid4().hex}"
    now = datetime.now(UTC)
    headers = {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(webhook_id, now, body),
        "content-type": "application/json",
    }
    httpx.post(f"{api}/v1/runs/{run['id']}/approval", content=body, headers=headers, timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_create_wait_notify_approve_complete_over_http(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, receiver: Receiver
) -> None:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_WEBHOOK_SECRET=SECRET,
        AIRLOCK_API_TOKEN=TOKEN,
        AIRLOCK_NOTIFY_URL=receiver.url,
        AIRLOCK_NOTIFY_SECRET=NOTIFY_SECRET,
    )
    base = stack.api()
    receiver.api = base
    stack.worker(airlock=True)  # airlock worker: it consumes the notifications too

    auth = {"Authorization": f"Bearer {TOKEN}"}
    created = httpx.post(f"{base}/v1/runs", json={"agent": "w1", "input": "mail"}, headers=auth)
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]

    def completed() -> dict[str, Any] | None:
        view: dict[str, Any] = httpx.get(f"{base}/v1/runs/{run_id}", headers=auth).json()
        return view if view["status"] == "completed" else None

    done = wait_for("the run to complete over HTTP", completed, timeout=60)
    assert done["output"] == "done" and done["pending"] is None
    assert stack.executions()[f"send_email {run_id}:call_1_0"] == 1
    wait_for("the settled notification", lambda: len(receiver.events) >= 2, timeout=30)
    types = [e["type"] for e in receiver.events]
    assert types == ["run.waiting_for_approval", "run.completed"]
    assert receiver.events[0]["data"]["pending"]["calls"][0]["name"] == "send_email"
    assert receiver.bad_signatures == 0
    decision = next(
        e
        for e in httpx.get(f"{base}/v1/runs/{run_id}/events", headers=auth).json()["events"]
        if e["kind"] == "decision"
    )
    assert decision["payload"]["approver"] == "bot"
