"""The Grafana dashboard in docs/ (docs/grafana-dashboard.json) queries only metrics that
the API's ``/metrics`` serves: a metric renamed or dropped fails here, not on a wall."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Api

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\b(airlock_[a-z0-9_]+)")
SUFFIXES = ("", "_total", "_bucket", "_count", "_sum", "_created")


def queried() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    return {name for expr in exprs for name in METRIC.findall(expr)}


def served(api: Api) -> set[str]:
    """Every sample name the families of ``/metrics`` can have (a labelled family that
    has seen nothing yet shows no sample, only its ``# TYPE``)."""
    text = api.client.get("/metrics").text
    families = {f.name for f in text_string_to_metric_families(text)}
    return {family + suffix for family in families for suffix in SUFFIXES}


def test_the_dashboard_queries_only_what_metrics_serves(api: Api) -> None:
    names = queried()
    assert {"airlock_approval_wait_seconds_bucket", "airlock_decisions_total"} <= names
    assert {"airlock_runs_waiting", "airlock_approval_expiries_total"} <= names
    assert "airlock_notification_lag_seconds" in names
    missing = names - served(api)
    assert not missing, f"the dashboard queries metrics /metrics does not serve: {missing}"


def test_a_metric_the_api_does_not_serve_is_found_missing(api: Api) -> None:
    assert "airlock_no_such_metric_total" not in served(api)
