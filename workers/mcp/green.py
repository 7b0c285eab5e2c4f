"""Waiting, from a segment, for what the MCP loop thread computes.

Under Celery's gevent pool a segment is a greenlet: blocking on a
``concurrent.futures.Future`` would wait on a lock of the hub that the loop thread
(an OS thread) can never release, and the hub ends the wait with ``LoopExit``. The
result is handed over the way gevent documents for other threads instead: an
``async_`` watcher of the hub's loop, whose ``send()`` any thread may call, wakes the
waiting greenlet; the other greenlets run meanwhile. Without gevent, a plain wait."""

from __future__ import annotations

import sys
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def green() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("threading"))


def wait(future: Future[T]) -> T:
    """The future's result (or its exception), waited for without holding the process."""
    if green():
        _wait_green(future)
    return future.result()


def _wait_green(future: Future[Any]) -> None:
    import gevent  # type: ignore[import-untyped]  # noqa: PLC0415 - a gevent worker's hub
    import gevent.event  # type: ignore[import-untyped]  # noqa: PLC0415

    done = gevent.event.Event()
    watcher = gevent.get_hub().loop.async_()
    watcher.start(done.set)
    try:
        future.add_done_callback(lambda _: watcher.send())
        done.wait()
    finally:
        watcher.close()
