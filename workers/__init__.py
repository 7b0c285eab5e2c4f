"""Airlock's entry points over one service layer, one room per job:

- ``airlock.workers.service``: the use cases and what they stand on (no door imported);
- ``airlock.workers.http``: the HTTP API and the approver inbox (``airlock.workers.api:app``);
- ``airlock.workers.tasks``: the Celery runtime: the app, its tasks, beat jobs, brokers and the
  notification dispatcher (the only room that imports Celery or kombu);
- ``airlock.workers.cli``: the ``airlock`` command.

The HTTP API and the CLI do not import each other; both publish through the Celery
runtime (import-linter holds them to it). ``celery -A airlock.workers worker`` finds the Celery
app as ``airlock.workers.app``, with the tasks and steps registered.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        from airlock.workers.tasks import app  # noqa: PLC0415 - only when asked: tasks and steps on it

        return app
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
