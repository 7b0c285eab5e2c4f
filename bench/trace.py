"""A timing trace of the approval path, for the benchmarks only. When ``BENCH_TRACE``
names a file, the API and worker processes (which import ``bench.agents``, and with
it this module) append a line ``<run id> <point> <epoch seconds>`` at each point:

- ``decided``: the decision's statement returned (committed), in the API;
- ``published``: its wake-up's publish returned, in the API;
- ``received``: the worker's consumer took the message (Celery's ``task_received``);
- ``task``: the segment's task began in a pool process (``task_prerun``);
- ``claimed``: the segment's claim returned.

Wrappers around those calls, installed in those processes only (the API's through
``bench.agents``, the worker's by ``celery worker --include bench.trace``); nothing of
it runs unless the variable is set. A line costs a file append (tens of microseconds),
and only while the file exists: the benchmark removes it (``Trace.off``) for its
throughput rounds, so they run without the trace's cost, as a deployment does."""

from __future__ import annotations

import functools
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

VARIABLE = "BENCH_TRACE"


def mark(run_id: str, point: str) -> None:
    try:  # appended to the file while it exists, never created here
        fd = os.open(os.environ[VARIABLE], os.O_WRONLY | os.O_APPEND)
    except FileNotFoundError:
        return
    try:
        os.write(fd, f"{run_id} {point} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


def install() -> None:
    """Wrap the points' calls in this process (idempotent)."""
    from celery.signals import task_prerun, task_received  # noqa: PLC0415

    from airlock.persistence.store.decisions import Decisions  # noqa: PLC0415
    from airlock.persistence.store.transitions import Transitions  # noqa: PLC0415
    from airlock.workers.tasks.broker import RUN_SEGMENT  # noqa: PLC0415
    from airlock.workers.tasks.publisher import Publisher  # noqa: PLC0415

    if getattr(Decisions.record_decision, "traced", False):
        return

    def after(method: Callable[..., Any], point: str, ok: Callable[[Any], bool]) -> Any:
        @functools.wraps(method)
        def traced(self: Any, run_id: str, *args: Any, **kwargs: Any) -> Any:
            result = method(self, run_id, *args, **kwargs)
            if ok(result):
                mark(str(run_id), point)
            return result

        traced.traced = True  # type: ignore[attr-defined]
        return traced

    Decisions.record_decision = after(  # type: ignore[method-assign]
        Decisions.record_decision, "decided", lambda outcome: outcome.result == "recorded"
    )
    Transitions.claim = after(  # type: ignore[method-assign]
        Transitions.claim, "claimed", lambda claim: claim is not None
    )
    publish = Publisher.__call__

    def published(self: Publisher, name: str, args: tuple[Any, ...]) -> str:
        task_id = publish(self, name, args)
        if name == RUN_SEGMENT:
            mark(str(args[0]), "published")
        return task_id

    Publisher.__call__ = published  # type: ignore[method-assign]

    @task_received.connect(weak=False)
    def _received(request: Any = None, **_: Any) -> None:
        if request is not None and request.name == RUN_SEGMENT:
            mark(str(request.args[0]), "received")

    @task_prerun.connect(weak=False)
    def _task(task: Any = None, args: Any = None, **_: Any) -> None:
        if task is not None and task.name == RUN_SEGMENT and args:
            mark(str(args[0]), "task")


if os.environ.get(VARIABLE):  # the worker imports this module as it starts (--include)
    install()


class Trace:
    """The points read back, by run: the last time each point was reached (a resume's
    come after the first segment's)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._points: dict[str, dict[str, float]] = defaultdict(dict)

    def on(self) -> None:
        """The deployment's processes trace from now on."""
        self._path.touch()

    def off(self) -> None:
        """They stop tracing (what they traced so far is kept)."""
        self._read()
        self._path.unlink(missing_ok=True)
        self._offset = 0

    def points(self, run_id: str) -> dict[str, float]:
        self._read()
        return self._points.get(run_id, {})

    def _read(self) -> None:
        if self._path.exists():
            with self._path.open() as fh:
                fh.seek(self._offset)
                for line in fh:
                    rid, point, at = line.split()
                    self._points[rid][point] = float(at)
                self._offset = fh.tell()
