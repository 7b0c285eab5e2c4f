"""``airlock health``: which worker nodes are this host's, and the one line it says."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airlock.workers.tasks import broker as celery_app
from airlock.workers.testing import free_port


def test_the_nodes_of_this_host_are_found_by_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever their names (-n worker@%h, celery@%h, several): no name is hard-coded
    (issue 27, defect 2), and a node of another host is not this one's."""
    host = socket.gethostname()
    replies = [
        {f"celery@{host}": {"ok": "pong"}},
        {f"worker@{host}": {"ok": "pong"}},
        {f"celery@not-{host}": {"ok": "pong"}},
        {f"celery@{host}.elsewhere": {"ok": "pong"}},
    ]
    asked: list[float] = []

    def ping(timeout: float, **_: Any) -> list[dict[str, Any]]:
        asked.append(timeout)
        return replies

    monkeypatch.setattr(celery_app.app.control, "ping", ping)
    assert celery_app.nodes_of_this_host(2.0) == [f"celery@{host}", f"worker@{host}"]
    assert asked == [2.0]
    monkeypatch.setattr(celery_app.app.control, "ping", lambda timeout, **_: None)
    assert celery_app.nodes_of_this_host(2.0) == []


def test_an_api_that_does_not_answer_is_unhealthy_in_one_line() -> None:
    env = {"PATH": "/usr/bin:/bin", "AIRLOCK_API_PORT": str(free_port())}
    done = subprocess.run(
        [sys.executable, "-m", "airlock.workers", "health", "api", "--timeout", "2"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout.startswith("api: ") and done.stdout.count("\n") == 1
    unknown = subprocess.run(
        [sys.executable, "-m", "airlock.workers", "health", "scheduler"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert unknown.returncode == 2 and "worker, beat or api" in unknown.stderr


def test_celery_beat_makes_the_folder_of_its_schedule(tmp_path: Path) -> None:
    """`celery -A airlock.workers beat` too (issue 27, defect 1): the folder of the schedule
    file is made as beat starts, before it opens the file."""
    schedule = tmp_path / "not" / "yet" / "celerybeat-schedule"
    scheduler = celery_app.Schedule(celery_app.app, schedule_filename=str(schedule), lazy=True)
    assert not schedule.parent.exists()
    scheduler.setup_schedule()
    scheduler.close()
    assert schedule.parent.is_dir()
