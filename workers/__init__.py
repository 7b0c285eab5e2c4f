"""Entry points over one service layer: Celery app and tasks, beat jobs, HTTP API, CLI.

``celery -A workers worker`` finds the Celery app as ``workers.app``.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        from workers import wiring  # noqa: F401, PLC0415 - it provides the tasks' service
        from workers.celery_app import app  # noqa: PLC0415 - only when asked

        return app
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
