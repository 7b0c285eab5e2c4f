"""OS threads, whatever pool the worker runs.

Under Celery's gevent pool the standard library is patched at start: ``threading``'s
threads are greenlets and its locks the hub's, so a thread of ours would stop whenever
a segment holds the CPU (a tool that computes, a large state to serialise). What must
go on regardless (the lease renewer) starts here as an OS thread, through
``gevent.monkey.get_original``, gevent's documented way to reach the unpatched modules.
Anything such a thread shares with the segments is guarded by a ``lock()`` from here,
held only for a few dictionary operations: a greenlet blocked on it blocks its hub."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def _original(module: str, name: str) -> Any:
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched(module):
        return monkey.get_original(module, name)
    return getattr(importlib.import_module(module), name)


def start_thread(target: Callable[[], None]) -> None:
    """Run ``target`` in a new OS thread (a daemon: it does not keep the process)."""
    _original("_thread", "start_new_thread")(target, ())


def lock() -> Any:
    """A lock of the OS, not of a gevent hub."""
    return _original("_thread", "allocate_lock")()


def sleep(seconds: float) -> None:
    """Sleep this OS thread."""
    _original("time", "sleep")(seconds)


def selector() -> Any:
    """A selector of the OS: an asyncio loop in an OS thread waits on it (gevent's, the
    patched default, would wait on a hub of that thread, which has nothing else to run
    and ends the wait with ``LoopExit``)."""
    return _original("selectors", "DefaultSelector")()
