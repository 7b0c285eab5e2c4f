"""Open idle event streams on one real API process (``airlock api``, uvicorn) on the
local PostgreSQL: what each costs the process, measured against the same process
before (its baseline, in the same run).

    .venv/bin/python -m bench.streams [--streams 1000] [--first 100]

It makes as many waiting runs, opens ``--first`` streams (one per run, each replayed
to its last event, then idle), then the rest, and measures the API process at each
step: its RSS, its threads, its open files, the PostgreSQL connections it holds
(``pg_stat_activity``, by its ``application_name``; how many are not idle), and its
CPU over an idle window. Then it cancels a few runs (their streams must end with
them: the streams are live, not dead sockets), closes every stream and measures
again. It prints the figures and their ratios to the baseline, and appends them,
with the command, to bench/results/streams.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from airlock.workers.service import Principal, Service
from airlock.workers.service.settings import Settings
from airlock.workers.tasks.wiring import build_service
from airlock.workers.testing import TOKEN, Stack
from bench.common import progress, record, temporary_database

APP = "airlock-bench-api"
"""The API's ``application_name`` on PostgreSQL: its connections are counted by it."""
SETTLE = 3.0
"""Seconds left for the API to settle before it is measured."""
IDLE_WINDOW = 10.0
"""Seconds over which the API's CPU is measured while the streams are idle."""
CANCELLED = 10
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass(frozen=True)
class Sample:
    streams: int
    rss_mb: float
    threads: int
    open_files: int
    pg_connections: int
    pg_busy: int
    cpu_ms_per_s: float | None = None


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sample(pid: int, admin: str, streams: int, *, idle_cpu: bool = False) -> Sample:
    time.sleep(SETTLE)
    cpu = None
    if idle_cpu:
        before, started = cpu_seconds(pid), time.monotonic()
        time.sleep(IDLE_WINDOW)
        cpu = (cpu_seconds(pid) - before) * 1000 / (time.monotonic() - started)
    status = status_of(pid)
    engine = create_engine(admin)
    with engine.connect() as conn:
        held, busy = conn.execute(
            text(
                "SELECT count(*), count(*) FILTER (WHERE state <> 'idle') "
                "FROM pg_stat_activity WHERE application_name = :app"
            ),
            {"app": APP},
        ).one()
    engine.dispose()
    return Sample(
        streams=streams,
        rss_mb=int(status["VmRSS"].split()[0]) / 1024,
        threads=int(status["Threads"]),
        open_files=len(os.listdir(f"/proc/{pid}/fd")),
        pg_connections=int(held),
        pg_busy=int(busy),
        cpu_ms_per_s=None if cpu is None else round(cpu, 2),
    )


def waiting_runs(service: Service, n: int) -> list[str]:
    """``n`` runs of ``w1`` waiting for approval."""
    ids = []
    for i in range(n):
        run, _ = service.start_run("w1", f"mail {i}")
        service.run_segment(run.id, "bench")
        ids.append(run.id)
        if (i + 1) % 200 == 0:
            progress(f"  {i + 1} waiting runs")
    return ids


@dataclass
class Client:
    """One open stream, read as raw HTTP (chunked server-sent events)."""

    run_id: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    seen: bytes = b""

    async def until(self, needle: bytes) -> None:
        while needle not in self.seen:
            chunk = await self.reader.read(65536)
            if not chunk:
                raise ConnectionError(f"the stream of {self.run_id} closed: {self.seen[-300:]!r}")
            self.seen += chunk


async def open_stream(port: int, run_id: str, last: int) -> Client:
    """A stream of ``run_id``, once it replayed the run's events up to ``last`` (its
    last): from then on, the API follows the run in its hub."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /v1/runs/{run_id}/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    client = Client(run_id, reader, writer)
    await client.until(b"\r\n\r\n")
    if not client.seen.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(f"the stream of {run_id} was refused: {client.seen[:200]!r}")
    await client.until(f"id: {last}\n".encode())
    return client


async def open_all(port: int, run_ids: list[str], last: int) -> list[Client]:
    clients: list[Client] = []
    for start in range(0, len(run_ids), 100):  # a hundred at once
        batch = run_ids[start : start + 100]
        clients += await asyncio.gather(*(open_stream(port, r, last) for r in batch))
    return clients


async def streams_end(clients: list[Client]) -> None:
    """Each of these streams ends with its run: the ``end`` frame, then the close."""
    async with asyncio.timeout(30):
        await asyncio.gather(*(c.until(b'"status":"cancelled"') for c in clients))


def close_all(clients: list[Client]) -> None:
    for client in clients:
        client.writer.close()


def ratios(base: Sample, now: Sample) -> dict[str, float]:
    return {
        "rss": round(now.rss_mb / base.rss_mb, 3),
        "threads": round(now.threads / base.threads, 3),
        "pg_connections": round(now.pg_connections / max(base.pg_connections, 1), 3),
    }


def show(samples: dict[str, Sample], base: Sample) -> None:
    print(f"{'step':<16}{'streams':>8}{'RSS MB':>9}{'threads':>9}{'files':>7}"
          f"{'PG conns':>10}{'busy':>6}{'CPU ms/s':>10}   ratios to the baseline")  # fmt: skip
    for name, s in samples.items():
        cpu = "" if s.cpu_ms_per_s is None else f"{s.cpu_ms_per_s:.1f}"
        print(f"{name:<16}{s.streams:>8}{s.rss_mb:>9.1f}{s.threads:>9}{s.open_files:>7}"
              f"{s.pg_connections:>10}{s.pg_busy:>6}{cpu:>10}   {ratios(base, s)}")  # fmt: skip


async def measure(
    pid: int, port: int, admin: str, ids: list[str], *, first: int, last: int
) -> tuple[dict[str, Sample], list[Client]]:
    """The baseline, then ``first`` streams open, then all of them (with the CPU over
    an idle window)."""
    samples = {"baseline": await asyncio.to_thread(sample, pid, admin, 0, idle_cpu=True)}
    progress(f"opening {first} streams")
    opened = await open_all(port, ids[:first], last)
    samples["first"] = await asyncio.to_thread(sample, pid, admin, len(opened))
    progress(f"opening {len(ids) - first} more")
    opened += await open_all(port, ids[first:], last)
    samples["all idle"] = await asyncio.to_thread(sample, pid, admin, len(opened), idle_cpu=True)
    return samples, opened


def run(streams: int, first: int) -> dict[str, object]:
    with temporary_database() as url, tempfile.TemporaryDirectory() as tmp:
        config = {
            "AIRLOCK_DATABASE_URL": f"{url}?application_name={APP}",
            "AIRLOCK_BROKER_URL": "filesystem://",
            "AIRLOCK_AGENTS": "bench.agents:AGENTS",
            "AIRLOCK_HOME": str(Path(tmp) / "home"),
            "AIRLOCK_API_TOKEN": TOKEN,
        }
        stack = Stack(config, Path(tmp))
        mine = Settings.model_validate({"database_url": url, "agents": "bench.agents:AGENTS"})
        service = build_service(mine, lambda run_id, delay=None: None)
        try:
            progress(f"making {streams} waiting runs")
            ids = waiting_runs(service, streams)
            base = stack.api()
            pid = stack.processes[-1].pid
            httpx.get(f"{base}/v1/runs/{ids[0]}/events", headers=AUTH)  # warmed
            port = int(base.rsplit(":", 1)[1])
            return asyncio.run(_steps(pid, port, url, ids, first=first, service=service))
        finally:
            stack.close()
            service.store.engine.dispose()


async def _steps(
    pid: int, port: int, admin: str, ids: list[str], *, first: int, service: Service
) -> dict[str, object]:
    last = (await asyncio.to_thread(service.stream_heads, ids[:1]))[ids[0]].last_seq
    samples, opened = await measure(pid, port, admin, ids, first=first, last=last)
    ended = opened[:CANCELLED]
    for client in ended:
        await asyncio.to_thread(service.cancel, client.run_id, by=Principal.trusted("bench"))
    await streams_end(ended)
    progress(f"{CANCELLED} cancelled runs: their streams ended with them")
    close_all(opened)
    samples["closed"] = await asyncio.to_thread(sample, pid, admin, 0)
    base = samples["baseline"]
    show(samples, base)
    each = samples["all idle"].rss_mb - samples["first"].rss_mb
    per_stream_kb = each * 1024 / max(len(ids) - first, 1)
    print(f"per stream (from {first} to {len(ids)} open): {per_stream_kb:.1f} KB of RSS")
    return {
        "samples": {k: asdict(v) for k, v in samples.items()},
        "ratios": {k: ratios(base, v) for k, v in samples.items()},
        "per_stream_kb": round(per_stream_kb, 1),
        "cancelled_streams_ended": CANCELLED,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--first", type=int, default=100)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.streams)), hard))
    results = run(args.streams, args.first)
    command = "streams " + " ".join(sys.argv[1:])
    record("streams", command.strip(), results, streams=args.streams, first=args.first)


if __name__ == "__main__":
    main()
