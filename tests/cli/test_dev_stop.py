"""``airlock dev`` stops on Ctrl-C with everything it started (issue 47, item 8: it took
11-12 s, its worker stopping warm). Only that it stopped is checked, within a generous
timeout; how fast is measured by hand (its docstrings say what bounds it)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from airlock.workers.cli.demo import free_port, poll
from tests.cli.test_cli import clean_env

PROC = Path("/proc")
pytestmark = pytest.mark.skipif(not PROC.is_dir(), reason="reads the process table in /proc")


def children(pid: int) -> list[int]:
    found = (PROC / str(pid) / "task" / str(pid) / "children").read_text().split()
    return [int(p) for p in found]


def alive_in(groups: set[int]) -> list[str]:
    """The processes of ``groups`` still alive (a zombie is dead: it waits to be reaped)."""
    left = []
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        state, _, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) in groups and state != "Z":
            left.append(f"{proc.name} ({state})")
    return left


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_dev_stops_with_its_worker_and_beat(tmp_path: Path, stop: signal.Signals) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "airlock.workers", "dev", "--port", str(port)]
    out = tmp_path / "dev.out"
    with out.open("w") as sink:
        dev = subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=sink, stderr=sink)
    try:
        poll("airlock dev's API", lambda: _answers(f"http://127.0.0.1:{port}") or dev.poll(), 120)
        assert dev.poll() is None, out.read_text()
        started = children(dev.pid)
        assert len(started) == 2, started  # its worker and its beat, each a group of its own
        poll("the worker's pool", lambda: len(alive_in(set(started))) > 2, 60)
        dev.send_signal(stop)
        code = dev.wait(60)  # generous: it stopped, however loaded the host
    finally:
        dev.kill()
    assert code == (0 if stop is signal.SIGINT else 128 + stop), out.read_text()
    assert alive_in(set(started)) == [], "left running after airlock dev ended"
    assert "Traceback" not in out.read_text()
