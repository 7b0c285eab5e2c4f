"""The Celery runtime (DESIGN §1): the app and its configuration, beat's schedule and the
brokers (``broker``), the tasks (``jobs``), what a worker and a beat do as they start
(``signals``) and run beside the pool (``steps``: the notification dispatcher, the
intake of a green pool), the delivery of notifications (``dispatcher``, ``notify``), the
worker's metrics, and the composition root every door builds its service from
(``wiring``). The only room that imports Celery or kombu (import-linter holds the others
to it); ``celery -A airlock.workers`` loads it through ``airlock.workers.app``.
"""

from __future__ import annotations

from airlock.workers.tasks import jobs, signals, steps
from airlock.workers.tasks.broker import app

app.steps["worker"].add(steps.Dispatch)
app.steps["consumer"].add(steps.Intake)

__all__ = ["app", "jobs", "signals", "steps"]
