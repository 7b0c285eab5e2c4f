"""Worker metrics: how long segments take, by outcome; how long notifications take to be
delivered (transition → 2xx).

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

_segments: Any = None
_lag: Any = None


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
    global _segments, _lag  # noqa: PLW0603 - one histogram each per process
    from prometheus_client import Histogram  # noqa: PLC0415 - only after the folder is set

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


def observe_segment(outcome: str, seconds: float) -> None:
    if _segments is not None:
        _segments.labels(outcome).observe(seconds)


def observe_lag(seconds: float) -> None:
    if _lag is not None:
        _lag.observe(seconds)
