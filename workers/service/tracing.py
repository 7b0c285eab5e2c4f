"""Traces of runs (DESIGN §9), on when the standard ``OTEL_TRACES_EXPORTER`` or
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, and free when not: ``NO_TRACES`` does nothing,
and nothing of OpenTelemetry's SDK is imported (``airlock.workers.service.otel`` holds
what does, imported only when traces are on).

One trace per run: its create continues the caller's ``traceparent`` and the run keeps
the span context (``agent_runs.trace_context``); each segment is a span
``airlock.segment`` of that trace, with its model calls and tool calls below it; the
wait for a person is a span ``airlock.approval`` from suspension to decision, made by
the process that records the decision."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from airlock.loop import Agent
from airlock.loop.errors import AirlockError
from airlock.loop.events import EventSink
from airlock.workers.service.seen import DecisionSeen


class RunTrace(Protocol):
    context: str | None
    """The run's span context to store (a W3C ``traceparent``), or None."""

    def created(self, run_id: str) -> None:
        """The run was created with this id."""


class Traces(Protocol):
    provider: Any
    """The OpenTelemetry tracer provider, or None when traces are off."""

    def run(self, agent: str, traceparent: str | None) -> Any:
        """A context manager over a run's create, giving its ``RunTrace``."""

    def segment(
        self, run_id: str, agent: Agent, trace_context: str | None, rules: Mapping[str, str]
    ) -> Any:
        """A context manager over a segment, giving its ``SegmentTrace``."""

    def decided(self, seen: DecisionSeen) -> None:
        """A decision request ended: a wait it ended is a span."""

    def headers(self, trace_context: str | None) -> dict[str, str]:
        """The ``traceparent`` of an outbound call on the run's behalf."""


class SegmentTrace(Protocol):
    stored: str | None
    """What the run keeps as it parks (its span context, and this segment's, which the
    next segment links to); None when traces are off."""

    def wrap(self, sink: EventSink) -> EventSink:
        """The loop's event sink, its model and tool calls made spans."""


class _NoSegment:
    stored: str | None = None

    def wrap(self, sink: EventSink) -> EventSink:
        return sink


class _NoRun:
    context: str | None = None

    def created(self, run_id: str) -> None:
        del run_id


class NoTraces:
    """Traces off: nothing is made, nothing is imported."""

    provider: Any = None

    @contextmanager
    def run(self, agent: str, traceparent: str | None) -> Iterator[RunTrace]:
        del agent, traceparent
        yield _NoRun()

    @contextmanager
    def segment(
        self, run_id: str, agent: Agent, trace_context: str | None, rules: Mapping[str, str]
    ) -> Iterator[Any]:
        del run_id, agent, trace_context, rules
        yield _NoSegment()

    def decided(self, seen: DecisionSeen) -> None:
        del seen

    def headers(self, trace_context: str | None) -> dict[str, str]:
        del trace_context
        return {}


NO_TRACES = NoTraces()

_OUTBOUND: ContextVar[Mapping[str, str] | None] = ContextVar("airlock_outbound", default=None)


@contextmanager
def on_behalf(headers: Mapping[str, str]) -> Iterator[None]:
    """Outbound calls made meanwhile (in this context) are the run's: they carry
    ``headers`` (its ``traceparent``)."""
    token = _OUTBOUND.set(headers)
    try:
        yield
    finally:
        _OUTBOUND.reset(token)


def outbound_headers() -> dict[str, str]:
    """The headers of the run an outbound call is made on behalf of (none when traces
    are off)."""
    return dict(_OUTBOUND.get() or {})


def current_traceparent() -> str | None:
    """The ``traceparent`` of the span current in this context (a segment's, a tool's, a
    request's) when traces are on; None when they are off (nothing of OpenTelemetry was
    imported, and nothing is imported here)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard variables ask for traces: an exporter named (not ``none``),
    or an OTLP endpoint given."""
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(exporter or any(env.get(name, "").strip() for name in endpoints))


def traces_from_env(env: Mapping[str, str] = os.environ) -> Traces:
    """This process's traces: exported as the ``OTEL_*`` variables say (the SDK's
    provider, set as the global one so that instrumentations nest under ours), or
    ``NO_TRACES``."""
    if not enabled(env):
        return NO_TRACES
    try:
        from airlock.workers.service.otel import OtelTraces  # noqa: PLC0415 - only when on

        return OtelTraces.configured()
    except ImportError as exc:
        named = (
            "OTEL_TRACES_EXPORTER" if env.get("OTEL_TRACES_EXPORTER") else "OTEL_EXPORTER_OTLP_*"
        )
        raise TracesUnavailableError(
            f"{named} asks for traces, but OpenTelemetry's SDK is not installed "
            f"({exc}): pip install 'airlock[otel]', or unset {named}"
        ) from exc


class TracesUnavailableError(AirlockError, RuntimeError):
    """Traces are asked for, and cannot be made."""
