"""Traces with OpenTelemetry (the extra ``airlock[otel]``): imported only when traces are
on (``airlock.workers.service.tracing``). Spans follow the GenAI semantic conventions for
model calls (``chat <model>``) and tool calls (``execute_tool <name>``)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from airlock.loop import Agent, LoopEvent
from airlock.loop.events import EventSink, ModelCalled, ToolExecuted
from airlock.workers.service.seen import DecisionSeen

PROPAGATOR = TraceContextTextMapPropagator()


def _parent(trace_context: str | None) -> Context | None:
    """The run's span (the first of what ``agent_runs.trace_context`` keeps)."""
    if not trace_context:
        return None
    return PROPAGATOR.extract({"traceparent": trace_context.split()[0]})


def _previous(trace_context: str | None) -> list[Link]:
    """A link to the segment before (the second of what the run keeps), if any."""
    parts = (trace_context or "").split()
    if len(parts) < 2:
        return []
    found = trace.get_current_span(PROPAGATOR.extract({"traceparent": parts[1]}))
    context = found.get_span_context()
    return [Link(context)] if context.is_valid else []


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


class _RunTrace:
    def __init__(self, span: Span, context: str | None) -> None:
        self._span = span
        self.context = context

    def created(self, run_id: str) -> None:
        self._span.set_attribute("airlock.run_id", run_id)


class TracedSink:
    """The loop's event sink, wrapped: a model call's event becomes its span (from the
    event before it), a tool call's its span (its measured duration)."""

    def __init__(
        self,
        inner: EventSink,
        tracer: Tracer,
        segment: Span,
        agent: Agent,
        rules: Mapping[str, str],
    ) -> None:
        self._inner = inner
        self._tracer = tracer
        self._context = trace.set_span_in_context(segment)
        name = getattr(agent.model, "model", None)
        self._model = name if isinstance(name, str) else None
        self._effects = {t.name: str(t.effect) for t in agent.tools}
        self._rules = rules
        self._mark = time.time_ns()

    def emit(self, event: LoopEvent) -> None:
        now = time.time_ns()
        if isinstance(event, ModelCalled):
            self._model_span(event, now)
        elif isinstance(event, ToolExecuted):
            self._tool_span(event, now)
        self._mark = now
        self._inner.emit(event)

    def _model_span(self, event: ModelCalled, now: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.usage.input_tokens": event.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": event.usage.completion_tokens,
            "airlock.iteration": event.iteration,
        }
        if self._model is not None:
            attributes["gen_ai.request.model"] = self._model
        name = f"chat {self._model}" if self._model else "chat"
        span = self._tracer.start_span(
            name, self._context, SpanKind.CLIENT, attributes, start_time=self._mark
        )
        span.end(end_time=now)

    def _tool_span(self, event: ToolExecuted, now: int) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.name,
            "gen_ai.tool.call.id": event.call_id,
            "airlock.outcome": str(event.outcome),
        }
        if event.name in self._effects:
            attributes["airlock.effect"] = self._effects[event.name]
        if event.call_id in self._rules:
            attributes["airlock.policy.rule"] = self._rules[event.call_id]
        started = max(self._mark, now - int(event.duration_ms * 1e6))
        span = self._tracer.start_span(
            f"execute_tool {event.name}", self._context, SpanKind.INTERNAL, attributes,
            start_time=started,
        )  # fmt: skip
        span.end(end_time=now)


class _Segment:
    def __init__(
        self, tracer: Tracer, span: Span, agent: Agent, rules: Mapping[str, str], stored: str | None
    ) -> None:
        self._made = (tracer, span, agent, rules)
        self.stored = stored

    def wrap(self, sink: EventSink) -> EventSink:
        return TracedSink(sink, *self._made)


class OtelTraces:
    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer("airlock")

    @classmethod
    def configured(cls) -> OtelTraces:
        """The SDK's provider, exporting as the ``OTEL_*`` variables say, set as the
        global one."""
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider as SdkProvider  # noqa: PLC0415

        from airlock.workers.service.otel_setup import processors  # noqa: PLC0415

        # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over this default
        provider = SdkProvider(resource=Resource.create({"service.name": "airlock"}))
        for processor in processors():
            provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
        return cls(provider)

    @contextmanager
    def run(self, agent: str, traceparent: str | None) -> Iterator[_RunTrace]:
        """The create's span: a child of the request's (FastAPI's, which continued the
        caller's ``traceparent``), else of the ``traceparent`` given, else a new trace."""
        current = trace.get_current_span().get_span_context().is_valid
        parent = None if current else _parent(traceparent)
        attributes = {"airlock.agent": agent}
        run = self._tracer.start_as_current_span("airlock.run", parent, attributes=attributes)
        with run as span:
            carrier: dict[str, str] = {}
            PROPAGATOR.inject(carrier)
            yield _RunTrace(span, carrier.get("traceparent"))

    @contextmanager
    def segment(
        self, run_id: str, agent: Agent, trace_context: str | None, rules: Mapping[str, str]
    ) -> Iterator[Any]:
        attributes = {"airlock.run_id": run_id, "airlock.agent": agent.name}
        with self._tracer.start_as_current_span(
            "airlock.segment", _parent(trace_context), links=_previous(trace_context),
            attributes=attributes,
        ) as span:  # fmt: skip
            carrier: dict[str, str] = {}
            PROPAGATOR.inject(carrier)
            run = (trace_context or "").split()[:1]
            stored = " ".join([*run, carrier["traceparent"]]) if run else None
            yield _Segment(self._tracer, span, agent, rules, stored)

    def decided(self, seen: DecisionSeen) -> None:
        if seen.verdict is None or seen.suspended_at is None or seen.decided_at is None:
            return
        current = trace.get_current_span().get_span_context()
        links = [Link(current)] if current.is_valid else []  # the decision's request
        attributes: dict[str, Any] = {
            "airlock.run_id": seen.run_id,
            "airlock.principal": seen.principal or "",
            "airlock.door": seen.door,
            "airlock.decision": seen.verdict,
            "airlock.quorum": seen.quorum,
            "airlock.wait_seconds": seen.waited or 0.0,
        }
        if seen.approved_by:
            attributes["airlock.approved_by"] = list(seen.approved_by)
        span = self._tracer.start_span(
            "airlock.approval", _parent(seen.trace_context), SpanKind.INTERNAL, attributes,
            links, start_time=_ns(seen.suspended_at),
        )  # fmt: skip
        span.end(end_time=_ns(seen.decided_at))

    def headers(self, trace_context: str | None) -> dict[str, str]:
        return {"traceparent": trace_context.split()[0]} if trace_context else {}
