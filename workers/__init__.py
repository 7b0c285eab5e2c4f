"""Airlock's entry points over one service layer, one room per job:

- ``airlock.workers.service``: the use cases and what they stand on (no door imported);
- ``airlock.workers.http``: the HTTP API and the approver inbox (``airlock.workers.api:app``);
- ``airlock.workers.tasks``: the Celery tasks, beat jobs and notification delivery;
- ``airlock.workers.cli``: the ``airlock`` command.

The doors do not import each other (import-linter holds them to it).
``celery -A workers worker`` finds the Celery app as ``airlock.workers.app``: the service's
broker, with the tasks registered.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        import airlock.workers.tasks  # noqa: F401, PLC0415 - registers the tasks on the app
        from airlock.workers.service.broker import app  # noqa: PLC0415 - only when asked

        return app
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
