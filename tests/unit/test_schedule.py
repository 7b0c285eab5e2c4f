"""Beat's schedule sends nothing to a queue that no worker need consume."""

from __future__ import annotations

from airlock.workers.service.settings import Settings
from airlock.workers.tasks.broker import DELIVER, NOTIFY_QUEUE, make_app

REDIS = "redis://redis:6379/0"


def queue_of(app_conf: object, task: str) -> str:
    routes = getattr(app_conf, "task_routes", {}) or {}
    return str(routes.get(task, {}).get("queue", getattr(app_conf, "task_default_queue", "")))


def test_without_a_notify_url_beat_queues_no_deliveries() -> None:
    """Attack review: docs/deploy.md runs the notifier only "when NOTIFY_URL is set", but
    beat queued a delivery on ``airlock.notifications`` every sweep interval whatever
    the settings: with no consumer, the list grew in Redis (about 1 kB each, every
    15 s, under ``noeviction``) until Redis refused writes, wake-ups included."""
    conf = make_app(Settings(broker_url=REDIS)).conf
    tasks = {entry["task"] for entry in conf.beat_schedule.values()}
    assert DELIVER not in tasks
    assert all(queue_of(conf, task) != NOTIFY_QUEUE for task in tasks)


def test_with_a_notify_url_beat_queues_no_deliveries_either() -> None:
    """Issue 46: each worker's dispatcher looks at the outbox itself; a delivery job of
    beat's would only wake a task that does nothing."""
    settings = Settings(broker_url=REDIS, notify_url="https://example.com/hook")
    conf = make_app(settings).conf
    tasks = {entry["task"] for entry in conf.beat_schedule.values()}
    assert DELIVER not in tasks
    assert all(queue_of(conf, task) != NOTIFY_QUEUE for task in tasks)
