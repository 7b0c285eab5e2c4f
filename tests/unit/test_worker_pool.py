"""Which of Celery's pools the worker warns of as it starts (``pool_warning``)."""

from __future__ import annotations

from celery.concurrency import get_implementation

from workers.celery_app import pool_warning


def test_only_the_threads_pool_is_warned_of() -> None:
    warning = pool_warning(get_implementation("threads"))
    assert warning is not None and "celery#6941" in warning and "prefork" in warning
    for name in ("prefork", "solo"):
        assert pool_warning(get_implementation(name)) is None
    assert pool_warning(None) is None
