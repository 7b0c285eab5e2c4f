"""Traces are free when the ``OTEL_*`` variables are unset (DESIGN §9): an API built and
a run created, parked, decided and finished import nothing of OpenTelemetry's SDK, and
the run keeps no span context. And the switch reads the standard variables."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airlock.workers.service.tracing import TracesUnavailableError, enabled, traces_from_env
from tests.conftest import migrate

SCRIPT = """
import sys
from fastapi.testclient import TestClient
from airlock.workers.http.api import create_app
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.settings import Settings
from airlock.workers.tasks.wiring import build_service

config = Settings.model_validate({"database_url": sys.argv[1],
                                  "agents": "tests.integration.agents:AGENTS"})
service = build_service(config, lambda run_id, delay=None: None)
client = TestClient(create_app(service, config, check_broker=lambda: None))
caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
run = client.post("/v1/runs", json={"agent": "w1", "input": "mail"},
                  headers={"traceparent": caller})
assert run.status_code == 201, run.text
run_id = run.json()["id"]
service.run_segment(run_id, "me")
digest = service.store.runs.require(run_id).turn_digest
service.record_decision(run_id, DecisionBody(turn_digest=digest, decision="approve"),
                        Principal.operator("ops"))
service.run_segment(run_id, "me")
assert service.store.runs.require(run_id).status.value == "completed"
assert service.store.runs.require(run_id).trace_context is None
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))
print("SDK:", loaded)
"""


def test_nothing_imports_the_sdk_with_otel_unset(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'airlock.db'}"
    migrate(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, url],
        env=env | {"AIRLOCK_HOME": str(tmp_path)},
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "SDK: []" in done.stdout, done.stdout


def test_traces_are_on_when_the_standard_variables_ask() -> None:
    assert not enabled({})
    assert enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert enabled({"OTEL_TRACES_EXPORTER": "otlp"})
    assert enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not enabled({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert not enabled({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})


def test_traces_asked_for_without_the_sdk_refuse_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [
        m
        for m in sys.modules
        if m.startswith(("opentelemetry.sdk", "airlock.workers.service.otel"))
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    with pytest.raises(TracesUnavailableError, match=r"OTEL_EXPORTER_OTLP_.*airlock\[otel\]"):
        traces_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
