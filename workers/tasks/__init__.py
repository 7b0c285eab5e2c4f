"""The Celery door: the tasks (``jobs``), what a worker and a beat do as they start
(``signals``), the delivery of notifications and the worker's metrics. A worker imports
this package when it starts (the app's ``include``); ``celery -A workers`` loads it
through ``airlock.workers.app``."""

from __future__ import annotations

from airlock.workers.tasks import jobs, signals

__all__ = ["jobs", "signals"]
