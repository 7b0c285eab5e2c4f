"""One trace per run across processes (issue 45): the API (here in the test's process,
exporting to memory) creates a run that continues the caller's trace; a worker process
runs its first segment and parks it; the API records the approval; another worker
process resumes it. Both workers export over OTLP/HTTP to a receiver in the test: every
span — the request's, both segments, the model and tool calls, the wait — is of the
caller's one trace."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.http.api import create_app
from airlock.workers.service import Service
from airlock.workers.service.otel import OtelTraces
from airlock.workers.service.registry import Registry
from airlock.workers.testing import SECRET, TOKEN, wait_for
from tests.api.conftest import Api
from tests.api.test_api import approval
from tests.integration.conftest import StackFactory

pytestmark = pytest.mark.integration

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER = f"00-{TRACE_ID}-b7ad6b7169203331-01"


@dataclass(frozen=True)
class Exported:
    name: str
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]
    instance: str
    links: tuple[str, ...]
    """The span ids it links to."""
    """The exporting process's ``service.instance.id``."""


class OtlpReceiver(ThreadingHTTPServer):
    """``POST /v1/traces`` (OTLP/HTTP, protobuf), kept as ``Exported`` spans."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Collect)
        self.spans: list[Exported] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def named(self, name: str) -> list[Exported]:
        return [s for s in self.spans if s.name == name]


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


class _Collect(BaseHTTPRequestHandler):
    server: OtlpReceiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            found = {a.key: _value(a.value) for a in resource.resource.attributes}
            instance = str(found.get("service.instance.id", ""))
            for scope in resource.scope_spans:
                for s in scope.spans:
                    self.server.spans.append(
                        Exported(
                            s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in s.attributes}, instance,
                            tuple(link.span_id.hex() for link in s.links),
                        )
                    )  # fmt: skip
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_run_parked_and_resumed_on_another_worker_is_one_trace(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, receiver: OtlpReceiver
) -> None:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="50",
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    service = Service(
        store=RunStore(stack.service.store.engine),
        registry=Registry.from_paths(stack.settings.agents),
        enqueue=stack.enqueue,
        traces=OtelTraces(provider),
    )
    settings = stack.settings.model_copy(update={"webhook_secret": SECRET, "api_token": TOKEN})
    api = Api(TestClient(create_app(service, settings, check_broker=lambda: None)), service)

    first = stack.worker()
    created = api.client.post(
        "/v1/runs", json={"agent": "w1", "input": "mail"},
        headers=api.headers() | {"traceparent": CALLER},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    run_id = created.json()["id"]
    stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL)
    wait_for("the first segment's span", lambda: receiver.named("airlock.segment"), timeout=30)
    first.stop()

    stack.worker()  # the other worker resumes it
    assert api.approve(run_id, approval(api.run(run_id))).status_code == 202
    stack.wait_status(run_id, RunStatus.COMPLETED, timeout=60)
    wait_for("the second segment's span", lambda: len(receiver.named("airlock.segment")) == 2, 30)

    local = exporter.get_finished_spans()
    names = {s.name for s in local} | {s.name for s in receiver.spans}
    assert {"POST /v1/runs", "airlock.run", "airlock.approval", "airlock.segment"} <= names
    assert {"chat", "execute_tool lookup", "execute_tool send_email"} <= names
    ours = [s for s in local if s.name in ("POST /v1/runs", "airlock.run", "airlock.approval")]
    assert {format(s.context.trace_id, "032x") for s in ours if s.context} == {TRACE_ID}
    assert {s.trace_id for s in receiver.spans} == {TRACE_ID}
    segments = receiver.named("airlock.segment")
    assert len({s.instance for s in segments}) == 2  # one in each worker process
    parked, resumed = segments
    assert resumed.links == (parked.span_id,) and not parked.links  # linked to the one before
    (run,) = [s for s in local if s.name == "airlock.run"]
    assert run.context is not None
    assert {s.parent for s in segments} == {format(run.context.span_id, "016x")}
    chats = receiver.named("chat")
    assert all(c.attributes["gen_ai.operation.name"] == "chat" for c in chats)
    assert all("gen_ai.usage.input_tokens" in c.attributes for c in chats)
    (send,) = receiver.named("execute_tool send_email")
    assert send.attributes["gen_ai.tool.name"] == "send_email"
    assert send.parent in {s.span_id for s in segments}
    (wait,) = [s for s in local if s.name == "airlock.approval"]
    assert dict(wait.attributes or {})["airlock.door"] == "webhook"
