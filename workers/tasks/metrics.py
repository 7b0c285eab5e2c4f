"""Worker metrics: how long segments take, by outcome; how long notifications take to be
delivered (transition → 2xx); the waits the expiry job ends.

Segments run in the worker's process (the gevent pool's greenlets) or in its prefork
pool's children, so the metrics use prometheus_client's multiprocess mode: each
process writes its samples to files in a folder, and the worker's main process
serves them all on ``AIRLOCK_WORKER_METRICS_PORT``. The mode is
chosen when prometheus_client is first imported, so it is imported here, lazily,
after the folder is set up, and only in a worker.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from airlock.workers.service.seen import DecisionSeen

_segments: Any = None
_lag: Any = None
_decisions: Any = None

WAIT_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
"""Seconds a run waits for a person: from seconds (a policy's quick nod) to a week."""


def serve(port: int, folder: Path) -> None:
    """In the worker's main process, before the pool forks: start serving."""
    serve_files(port, folder)
    record()


def serve_files(port: int, folder: Path) -> None:
    """Serve the samples the processes write to ``folder`` (emptied first: an earlier
    worker's) on ``port``; this process records none unless it calls ``record``."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)
    from prometheus_client import (  # noqa: PLC0415 - only after the folder is set
        CollectorRegistry,
        multiprocess,
        start_http_server,
    )

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    start_http_server(port, registry=registry)


def record() -> None:
    """This process records its segments' durations, to the folder
    ``PROMETHEUS_MULTIPROC_DIR`` names (where ``serve_files`` serves them from)."""
    global _segments, _lag, _decisions  # noqa: PLW0603 - one of each per process
    from prometheus_client import (  # noqa: PLC0415 - only after the folder is set
        Counter,
        Histogram,
    )

    _segments = Histogram(
        "airlock_segment_duration_seconds",
        "Time from claim to the segment's last write, by outcome",
        ["outcome"],
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    )
    _lag = Histogram(
        "airlock_notification_lag_seconds",
        "Time from a run's transition to its notification's 2xx",
        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
    )
    # the same names as the API's (``airlock.workers.http.metrics``): here, the expiry's
    _decisions = (
        Counter(
            "airlock_decisions_total",
            "Decision requests, by the door they came through and what they came to",
            ["door", "outcome"],
        ),
        Histogram(
            "airlock_approval_wait_seconds",
            "Time a run waited from suspension to the decision that ended the wait, by"
            " agent and outcome (approved, denied, mixed, expired)",
            ["agent", "outcome"],
            buckets=WAIT_BUCKETS,
        ),
        Counter(
            "airlock_approval_expiries_total",
            "Waits ended by their approval's expiry, by agent",
            ["agent"],
        ),
    )


def observe_segment(outcome: str, seconds: float) -> None:
    if _segments is not None:
        _segments.labels(outcome).observe(seconds)


def observe_lag(seconds: float) -> None:
    if _lag is not None:
        _lag.observe(seconds)


def observe_decision(seen: DecisionSeen) -> None:
    """A decision this process's service recorded (a worker's: the expiry job's)."""
    if _decisions is not None:
        record_decision(seen, *_decisions)


def record_decision(seen: DecisionSeen, decisions: Any, waits: Any, expiries: Any) -> None:
    """``seen`` in the decision metrics (the API's, or a worker's)."""
    decisions.labels(seen.door, seen.outcome).inc()
    waited = seen.waited
    if waited is not None and seen.agent is not None and seen.verdict is not None:
        waits.labels(seen.agent, seen.verdict).observe(waited)
        if seen.verdict == "expired":
            expiries.labels(seen.agent).inc()
