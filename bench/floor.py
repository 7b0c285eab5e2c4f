"""The floor of our own stack: a no-op Celery task hop on the same broker, with the same
Celery configuration as Airlock's, that does one INSERT+COMMIT on the same PostgreSQL.

A worker runs it as ``celery -A bench.floor worker``.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Engine, text

from airlock.persistence.db import make_engine
from airlock.workers.service.settings import settings
from airlock.workers.tasks.broker import make_app

app = make_app(settings())
FLOOR = "bench.floor.v1"
QUEUE = "bench_floor"  # its own queue: the floor's worker and Airlock's run side by side
app.conf.task_default_queue = QUEUE


@lru_cache(maxsize=1)
def engine() -> Engine:
    return make_engine(settings().database_url)


@app.task(name=FLOOR)
def floor(n: int) -> None:
    with engine().begin() as conn:
        conn.execute(text("INSERT INTO bench_floor (n) VALUES (:n)"), {"n": n})
