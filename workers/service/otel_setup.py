"""The SDK's span processors as the standard ``OTEL_TRACES_EXPORTER`` names them
(``otlp``, the default: OTLP over HTTP, configured by ``OTEL_EXPORTER_OTLP_*``;
``console``), each batching (``OTEL_BSP_*``)."""

from __future__ import annotations

import os

from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter


def exporters() -> list[SpanExporter]:
    names = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")
    found: list[SpanExporter] = []
    for name in (n.strip() for n in names if n.strip()):
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )

            found.append(OTLPSpanExporter())
        elif name == "console":
            found.append(ConsoleSpanExporter())
        else:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER={name!r}: Airlock exports traces with otlp or console"
            )
    return found


def processors() -> list[SpanProcessor]:
    return [BatchSpanProcessor(exporter) for exporter in exporters()]
