"""One trace per run (DESIGN §9), in one process: the create continues the caller's
``traceparent``; both segments of a run that parks are spans of that trace, with the
model and tool calls below them as GenAI spans; the wait for a person is a span from
suspension to decision. (tests/integration/test_traces.py: the same across processes.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from airlock.workers.http.api import create_app
from airlock.workers.service import Service
from airlock.workers.service.otel import OtelTraces
from airlock.workers.service.registry import Registry
from airlock.workers.service.settings import Settings
from airlock.workers.tasks import notify
from airlock.workers.testing import SECRET, TOKEN
from tests.api.conftest import Api
from tests.api.test_api import approval
from tests.integration.test_client import Receiver

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
def traced(db_url: str) -> Iterator[tuple[Api, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = Settings.model_validate(
        {"database_url": db_url, "agents": "tests.integration.agents:AGENTS",
         "webhook_secret": SECRET, "api_token": TOKEN}
    )  # fmt: skip
    enqueued: list[str] = []
    service = Service(
        store=RunStore(make_engine(db_url)),
        registry=Registry.from_paths(config.agents),
        enqueue=lambda run_id, delay=None: enqueued.append(run_id),
        notify=lambda event_type, run_id: None,  # notifications are recorded in the outbox
        traces=OtelTraces(provider),
    )
    app = create_app(service, config, check_broker=lambda: None)
    yield Api(TestClient(app), service, enqueued), exporter
    service.store.engine.dispose()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_a_parked_run_is_one_trace_from_the_caller_s(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    created = api.client.post(
        "/v1/runs",
        json={"agent": "w1", "input": "mail 42"},
        headers=api.headers() | {"traceparent": CALLER},
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    stored = api.service.store.runs.require(run_id).trace_context
    assert stored is not None and stored.split("-")[1] == TRACE_ID
    api.segment(run_id)  # to the turn that asks
    view = api.run(run_id)
    assert api.approve(run_id, approval(view)).status_code == 202
    api.segment(run_id)  # the approved call, then the answer
    assert api.run(run_id)["status"] == "completed"

    spans = exporter.get_finished_spans()
    ours = [s for s in spans if s.name.startswith(("airlock.", "chat", "execute_tool"))]
    assert {format(s.context.trace_id, "032x") for s in ours if s.context} == {TRACE_ID}
    # the request's own span (FastAPI's) continued the caller's trace too
    (request,) = [s for s in spans if s.name == "POST /v1/runs"]
    assert request.context is not None and format(request.context.trace_id, "032x") == TRACE_ID
    (run,) = by_name(spans, "airlock.run")
    assert attrs(run)["airlock.run_id"] == run_id
    segments = by_name(spans, "airlock.segment")
    assert len(segments) == 2
    # the resumed segment links to the one that parked
    assert not segments[0].links and segments[1].links
    assert segments[1].links[0].context.span_id == segments[0].context.span_id
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in segments)
    assert run.parent is not None and request.context is not None
    # nested in the request's own spans (FastAPI's endpoint span), not beside them
    inner = {s.context.span_id for s in spans if s.context and s.name.startswith("fastapi")}
    assert run.parent.span_id in inner | {request.context.span_id}
    chats = by_name(spans, "chat")
    assert len(chats) == 3  # the scripted model's three turns
    assert attrs(chats[0])["gen_ai.operation.name"] == "chat"
    assert {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"} <= set(attrs(chats[0]))
    (send,) = by_name(spans, "execute_tool send_email")
    assert attrs(send)["gen_ai.tool.name"] == "send_email"
    assert attrs(send)["gen_ai.tool.call.id"] == view["pending"]["calls"][0]["id"]
    assert attrs(send)["airlock.effect"] == "write"
    assert send.parent is not None and send.parent.span_id == segments[1].context.span_id
    (wait,) = by_name(spans, "airlock.approval")
    assert attrs(wait)["airlock.door"] == "webhook"
    assert attrs(wait)["airlock.decision"] == "approved"
    assert attrs(wait)["airlock.quorum"] == 1
    assert attrs(wait)["airlock.wait_seconds"] >= 0
    assert wait.parent is not None and wait.parent.span_id == run.context.span_id
    # the decision's request (its own trace: it sent no traceparent) is linked to it
    (decision,) = [s for s in spans if s.name == "POST /v1/runs/{run_id}/approval"]
    assert decision.context is not None and wait.links
    assert wait.links[0].context.trace_id == decision.context.trace_id


def test_a_notification_carries_the_run_s_traceparent(
    traced: tuple[Api, InMemorySpanExporter],
) -> None:
    api, _ = traced
    created = api.client.post(
        "/v1/runs",
        json={"agent": "w1", "input": "mail 42"},
        headers=api.headers() | {"traceparent": CALLER},
    )
    run_id = created.json()["id"]
    api.segment(run_id)  # it parks: a run.waiting_for_approval notification is due
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert notify.deliver_due(api.service, server.url, SECRET).delivered == 1
    finally:
        server.shutdown()
        server.server_close()
    ((headers, _),) = server.received
    sent = {k.lower(): v for k, v in headers.items()}["traceparent"]
    kept = api.service.store.runs.require(run_id).trace_context
    assert kept is not None and sent == kept.split()[0]  # the run's, not the segment's
    assert sent.split("-")[1] == TRACE_ID
