"""What every benchmark shares: a throwaway migrated database, progress, the results file."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from airlock.persistence.migrate import upgrade as migrate
from airlock.workers.testing import ROOT

PG = os.environ.get(
    "AIRLOCK_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_SERVER = os.environ.get("AIRLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379")
REDIS_DB = int(os.environ.get("AIRLOCK_BENCH_REDIS_DB", "12"))
"""The benchmarks' own database number on the shared Redis, flushed by each benchmark
(``bench.paired`` uses the two after it too)."""


def redis_url(offset: int = 0) -> str:
    """The URL of the benchmarks' db number (``AIRLOCK_BENCH_REDIS_DB``) + ``offset``."""
    return f"{REDIS_SERVER}/{REDIS_DB + offset}"


REDIS = redis_url()
RESULTS = Path(__file__).parent / "results"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def temporary_database(server: str = PG) -> Iterator[str]:
    """A new database on ``server``, migrated to head, dropped afterwards."""
    name = f"airlock_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def record(benchmark: str, command: str, results: object, **details: object) -> None:
    """Append one run's results, with the command that made them, to results/<name>.jsonl."""
    RESULTS.mkdir(exist_ok=True)
    entry: dict[str, object] = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f"python -m bench.{command}",
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "rev": revision(),
        "loadavg_at_end": [round(v, 2) for v in os.getloadavg()],
        **details,
        "results": results,
    }
    with (RESULTS / f"{benchmark}.jsonl").open("a") as fh:
        fh.write(json.dumps(entry) + "\n")


def revision() -> str:
    """This checkout's commit, ``-dirty`` when code differs from it (results aside)."""
    git = ["git", "-C", str(ROOT)]
    rev = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], check=False, capture_output=True, text=True
    )
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
        check=False,
        capture_output=True,
        text=True,
    )
    return rev.stdout.strip() + ("-dirty" if changed.stdout.strip() else "")


@dataclass(frozen=True)
class Proc:
    pid: int
    group: int
    """Its process group: a worker the harness started leads one with its pool."""
    command: str
    cpu: float
    """User + system seconds it has run so far."""
    parent: int = 0
    """Its parent's pid: ``airlock worker``'s children lead process groups of their own."""


def processes() -> list[Proc]:
    """Every process this user can see, from /proc (Linux); none elsewhere."""
    out = []
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                command = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        cpu = (int(fields[11]) + int(fields[12])) / tick
        out.append(Proc(int(entry), int(fields[2]), command, cpu, int(fields[1])))
    return out


def led_by(leader: int) -> Callable[[Proc], bool]:
    """A process a worker the harness started leads: its pool (its process group) or
    its children."""
    return lambda proc: leader in (proc.group, proc.parent)


class CpuMeter:
    """Where a measure's CPU time went: user + system seconds per named group of
    processes (``groups``: a name and a test of membership each; a process counts in
    the first group it belongs to), between ``start`` and ``stop``. Processes that
    end in between are not counted."""

    def __init__(self, groups: Mapping[str, Callable[[Proc], bool]]) -> None:
        self._groups = groups
        self._since: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        totals = dict.fromkeys(self._groups, 0.0)
        for proc in processes():
            for name, member in self._groups.items():
                if member(proc):
                    totals[name] += proc.cpu
                    break
        return totals

    def start(self) -> None:
        self._since = self._now()

    def stop(self) -> dict[str, float]:
        now = self._now()
        return {name: now[name] - self._since.get(name, 0.0) for name in now}


def outbox_figures(engine: Any) -> dict[str, Any]:
    """The outbox as it stands (issue 46): notifications recorded, delivered, not yet
    delivered, the failed attempts (``notify_failed`` events: retries), and the lag of
    those delivered (transition → 2xx) p50 / p99 in seconds."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT created_at, delivered_at FROM outbox")).all()
        failed = conn.execute(
            text("SELECT count(*) FROM run_events WHERE kind = 'notify_failed'")
        ).scalar_one()
    lags = sorted((d - c).total_seconds() for c, d in rows if d is not None)
    return {
        "recorded": len(rows),
        "delivered": len(lags),
        "undelivered": len(rows) - len(lags),
        "failed_attempts": int(failed),
        "lag_p50_s": _rank(lags, 0.5),
        "lag_p99_s": _rank(lags, 0.99),
    }


def _rank(ordered: list[float], q: float) -> float | None:
    """The nearest-rank ``q`` quantile of ``ordered``, in seconds, or None of none."""
    if not ordered:
        return None
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)
