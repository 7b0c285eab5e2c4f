"""The session pool cooperates with the gevent pool (``tests.unit.green_mcp_probe``)."""

from __future__ import annotations

import subprocess
import sys

from airlock.workers.testing import ROOT


def test_segments_waiting_for_mcp_answers_leave_the_gevent_hub_free() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.unit.green_mcp_probe"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [f"answer {n}" for n in range(20)]
