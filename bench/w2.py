"""W2: W1 with a model that takes its time, driven over HTTP by C clients at once,
against the peer in the same run (issue 28).

    .venv/bin/python -m bench.w2 --clients 50 --latency 0.5 --seconds 30
    .venv/bin/python -m bench.w2 --clients 200 --worker-args "-P gevent -c 400" --no-peer

The model is ``bench.fake_openai``: a real HTTP server in a process of its own that
answers every Chat Completions call after ``--latency`` seconds, the turn decided by the
tool results the call carries (a read tool, then the gated write, then an answer).
Airlock: a PostgreSQL database of its own (on the local server), the benchmarks'
Redis db (bench.common.redis_url), ``airlock api`` and ``airlock worker`` with no
options (``--worker-args`` adds some), the agent ``bench.w2_agents``'s ``OpenAIModel``
pointed at the fake server. Each of ``--clients`` clients (asyncio, one kept-alive
connection each, ``bench.http.AsyncClient``) drives runs one after another as a user
does: ``POST /v1/runs``, ``GET /v1/runs/{id}`` every 250 ms until it waits for
approval, a Standard Webhooks-signed approval, ``GET`` every 250 ms until completed
(``--poll`` sets another interval, for both sides). After ``--warmup`` seconds,
``--seconds`` are measured; the runs in flight then are finished but not counted.

The peer (``--peer``, the default, when bench/.peer-venv exists: ``python -m
bench.peer`` makes it) is LangGraph with ``AsyncPostgresSaver``, one asyncio process,
calling the same fake server with ``httpx.AsyncClient``, on a database of its own; its
clients run in its process (it has no API: a create is a task, a poll reads the
thread's state every 250 ms), ``bench/peer/langgraph_w2.py``. Airlock is measured
first, then the peer, on the same host within a minute or two.

Prints runs/s, the run's p50/p95 (create → seen completed), the time each run spent in
Airlock's hands (created → waiting + decided → completed, from the database's own
timestamps: the run's time less its wait for the approval), the physical limit
C / (3 x latency) (each run waits on three model calls), the worker's RSS (its process
tree, sampled every second: the peak), the PostgreSQL connections the worker holds
(``pg_stat_activity`` by ``application_name``, the worker's ``PGAPPNAME``; the peak),
the CPU per run of each process, the host's load, and the ratios to the peer; appends
them with the command to bench/results/w2.jsonl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlalchemy import create_engine, text

from airlock.workers.cli.demo import signed_request
from airlock.workers.testing import SECRET, Process, Stack, airlock_env, free_port, wait_for
from bench import peer, receiver
from bench.common import (
    PG,
    CpuMeter,
    Proc,
    led_by,
    outbox_figures,
    progress,
    record,
    redis_url,
    revision,
    temporary_database,
)
from bench.http import AsyncClient
from bench.stack import AUTH, bench_config, pct, rss_kb, up, wait_answers
from bench.w2_agents import MODEL_URL

POLL = 0.25
"""Seconds between a client's polls, as the issue's users poll (``--poll``)."""
WORKER_APP = "airlock-w2-worker"
API_APP = "airlock-w2-api"
DRAIN = 120.0
"""Seconds the runs in flight at the window's end have to finish (more than a lease,
60 s, and a sweep, 15 s: a segment lost to a broker's blip is run again by then)."""
BEAT_APP = "airlock-w2-beat"


# -- the statistics ---------------------------------------------------------------------------


def physical_limit(clients: int, latency: float) -> float:
    """Runs per second if each run took exactly its three model calls: C / (3 x latency)."""
    return clients / (3 * latency)


def summarize(
    runs: list[tuple[float, float]], window: tuple[float, float], clients: int, latency: float
) -> dict[str, Any]:
    """Runs per second and the run's p50/p95 over the runs that completed in ``window``
    (each run: its start and end, on the window's clock), and the runs per second that
    C clients make with that mean run (C / mean)."""
    begin, end = window
    done = [b - a for a, b in runs if begin <= b <= end]
    limit = physical_limit(clients, latency)
    rate = len(done) / (end - begin)
    return {
        "runs": len(done),
        "runs_per_s": round(rate, 2),
        # Little's law for C clients that start a run as soon as one ends: a steadier
        # figure when a run lasts a good part of the window (the completions in a window
        # come in waves of up to C)
        "runs_per_s_little": round(clients / statistics.fmean(done), 2) if done else 0.0,
        "run_p50_s": round(statistics.median(done), 3) if done else None,
        "run_p95_s": round(pct(done, 0.95), 3) if done else None,
        "physical_limit": round(limit, 2),
        "of_limit": round(rate / limit, 3),
    }


def per_run(seconds: dict[str, float], runs: int) -> dict[str, float]:
    """CPU milliseconds per run of each group."""
    return {name: round(s / runs * 1000, 2) if runs else 0.0 for name, s in seconds.items()}


def machine_busy() -> float:
    """Seconds of CPU the whole machine has spent so far (all cores, all users):
    /proc/stat's user, nice, system, irq, softirq and steal."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / tick


@dataclass
class Window:
    """What is measured between the window's start and end: CPU by group (and the
    machine's, whose rest is other users'), the peaks of sampled figures."""

    groups: dict[str, Callable[[Proc], bool]]
    meter: CpuMeter = field(init=False)
    started: float = 0.0
    busy: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    machine: float = 0.0
    elapsed: float = 0.0
    peaks: dict[str, int] = field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        self.meter = CpuMeter(self.groups)

    def start(self) -> None:
        self.meter.start()
        self.busy = machine_busy()
        self.started = time.monotonic()

    def stop(self) -> None:
        self.cpu = self.meter.stop()
        self.machine = machine_busy() - self.busy
        self.elapsed = time.monotonic() - self.started
        self.load = os.getloadavg()

    def peak(self, name: str, value: int) -> None:
        self.peaks[name] = max(self.peaks.get(name, 0), value)

    def host(self) -> dict[str, Any]:
        """The machine's CPU during the window, in cores: all of it, and what processes
        outside the benchmark took (the other agents' on a shared host)."""
        ours = sum(self.cpu.values())
        return {
            "cores_busy": round(self.machine / self.elapsed, 2),
            "cores_busy_others": round(max(0.0, self.machine - ours) / self.elapsed, 2),
            "loadavg_1_5_15": [round(v, 2) for v in self.load],
        }


# -- the deployment ---------------------------------------------------------------------------


def fake_model(latency: float, tmp: Path) -> tuple[Process, str]:
    port = free_port()
    argv = [sys.executable, "-m", "bench.fake_openai", "--port", str(port)]
    model = Process("model", [*argv, "--latency", str(latency)], os.environ, tmp / "model.log")
    model.start()
    url = f"http://127.0.0.1:{port}"
    wait_for("the fake model", lambda: _answers(f"{url}/stats"), timeout=30)
    return model, url


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        time.sleep(0.1)
        return False


def model_stats(url: str, *, reset: bool = False) -> dict[str, int]:
    if reset:
        answer = httpx.post(f"{url}/stats/reset", timeout=5)
    else:
        answer = httpx.get(f"{url}/stats", timeout=5)
    stats: dict[str, int] = answer.json()
    return stats


def worker_command(worker_args: str) -> list[str]:
    """``airlock worker`` as an operator starts it: no options unless given."""
    argv = [sys.executable, "-m", "airlock.workers", "worker", "-n", "w2@%h"]
    return [*argv, *shlex.split(worker_args)]


@contextmanager
def airlock(
    model_url: str, worker_args: str, tmp: Path, settings: dict[str, str]
) -> Iterator[tuple[Stack, str]]:
    broker = redis_url()
    redis.Redis.from_url(broker).flushdb()
    with temporary_database() as url:
        config = bench_config(url, broker, tmp) | {"AIRLOCK_AGENTS": "bench.w2_agents:AGENTS"}
        config |= settings
        stack = Stack(config, tmp)
        env = airlock_env(config, stack.outbox) | {MODEL_URL: f"{model_url}/v1"}
        port = free_port()
        api = [sys.executable, "-m", "airlock.workers", "api", "--port", str(port)]
        try:
            stack.processes.append(
                Process("api", api, env | {"PGAPPNAME": API_APP}, tmp / "api.log").start()
            )
            base = f"http://127.0.0.1:{port}"
            wait_for("the API", lambda: up(base), timeout=30)
            worker_env = env | {"PGAPPNAME": WORKER_APP}
            worker = Process("worker", worker_command(worker_args), worker_env, tmp / "worker.log")
            stack.processes.append(worker.start())
            # as deployed: the sweeper re-sends what a lost message or segment left behind
            schedule = str(tmp / "beat-schedule")
            beat = [sys.executable, "-m", "airlock.workers", "beat", "-s", schedule]
            beat_env = env | {"PGAPPNAME": BEAT_APP}
            stack.processes.append(Process("beat", beat, beat_env, tmp / "beat.log").start())
            wait_answers(stack)
            yield stack, base
        finally:
            stack.close()
            redis.Redis.from_url(broker).flushdb()


def served_times(stack: Stack, wall: tuple[float, float]) -> list[float]:
    """The time in Airlock's hands of each run completed in ``wall`` (epoch seconds),
    from the database's own timestamps (UTC): created → waiting, plus decided →
    completed (three model calls' worth, at best), without the time it waited for its
    approval (the client's poll and webhook)."""
    query = text(
        "SELECT extract(epoch FROM (r.suspended_at - r.created_at) + (r.updated_at - d.created_at))"
        " FROM agent_runs r JOIN decisions d ON d.run_id = r.id WHERE r.status = 'completed'"
        " AND extract(epoch FROM r.updated_at) BETWEEN :begin AND :end"
    )
    with stack.service.store.engine.connect() as conn:
        rows = conn.execute(query, {"begin": wall[0], "end": wall[1]}).scalars()
        return [float(v) for v in rows]


def _answers_ping(stack: Stack) -> bool:
    """Whether a worker answers a ping (twice: this side's connection may have been
    closed under it)."""
    for _ in range(2):
        try:
            return bool(stack.celery.control.ping(timeout=2))
        except Exception:  # a broker error: try once more
            continue
    return False


def warnings(log: str) -> dict[str, int]:
    """How many times the worker's log said each warning or error (Celery's format)."""
    said: dict[str, int] = {}
    for line in log.splitlines():
        head, sep, message = line.partition("] ")
        if sep and ("WARNING/" in head or "ERROR/" in head):
            key = re.sub(r"\[[0-9a-f-]{36}\]", "[…]", message)[:120]
            said[key] = said.get(key, 0) + 1
    return said


def connections(engine: Any, application: str) -> int:
    """The connections ``application`` holds open on the server now."""
    query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name")
    with engine.connect() as conn:
        return int(conn.execute(query, {"name": application}).scalar_one())


# -- the clients ------------------------------------------------------------------------------


class RunFailedError(Exception):
    pass


async def _poll(
    client: AsyncClient, base: str, run_id: str, wanted: str, poll: float
) -> dict[str, Any]:
    while True:
        await asyncio.sleep(poll)
        view: dict[str, Any] = (await client.get(f"{base}/v1/runs/{run_id}", headers=AUTH)).json()
        if view["status"] == wanted:
            return view
        if view["status"] in ("failed", "cancelled", "completed"):
            raise RunFailedError(f"run {run_id} is {view['status']}, not {wanted}")


async def one_run(client: AsyncClient, base: str, poll: float = POLL) -> tuple[float, float]:
    """One W2 run as a user drives it: (its start, the first poll that saw it done)."""
    start = time.monotonic()
    body: dict[str, Any] = {"agent": "w2", "input": "go"}
    created = await client.post(f"{base}/v1/runs", json=body, headers=AUTH)
    if created.status_code not in (200, 201):
        raise RunFailedError(f"create answered {created.status_code}: {created.text}")
    run_id = created.json()["id"]
    waiting = await _poll(client, base, run_id, "waiting_for_approval", poll)
    decision = {"turn_digest": waiting["pending"]["turn_digest"], "decision": "approve"}
    path, content, headers = signed_request(f"/v1/runs/{run_id}/approval", decision, SECRET)
    approved = await client.post(f"{base}{path}", content=content, headers=headers)
    if approved.status_code != 202:
        raise RunFailedError(f"the approval answered {approved.status_code}: {approved.text}")
    await _poll(client, base, run_id, "completed", poll)
    return start, time.monotonic()


@dataclass
class Drive:
    runs: list[tuple[float, float]] = field(default_factory=list)
    started: int = 0
    errors: list[str] = field(default_factory=list)
    unfinished: int = 0
    """Clients whose run had not finished ``DRAIN`` seconds after the window."""
    window: tuple[float, float] = (0.0, 0.0)
    wall: tuple[float, float] = (0.0, 0.0)
    """The window on the wall clock (epoch seconds)."""


async def drive(
    base: str,
    clients: int,
    *,
    warmup: float,
    seconds: float,
    window: Window,
    sample: Callable[[], None],
    poll: float = POLL,
) -> Drive:
    """``clients`` clients driving runs for ``warmup`` + ``seconds``; ``window`` measures
    the last ``seconds``, ``sample`` runs (in a thread) every second meanwhile."""
    out = Drive()
    begin = time.monotonic()
    wall = time.time() - begin  # monotonic → epoch
    until = begin + warmup + seconds

    async def one_client(k: int) -> None:
        await asyncio.sleep(k * poll / clients)  # not all in one phase of the poll
        client = AsyncClient()
        try:
            while time.monotonic() < until:
                out.started += 1
                try:
                    out.runs.append(await one_run(client, base, poll))
                except (RunFailedError, OSError, ValueError, KeyError) as exc:
                    out.errors.append(repr(exc))
                    client.close()
                    await asyncio.sleep(poll)
        finally:
            client.close()

    async def measure() -> None:
        await asyncio.sleep(warmup)
        window.start()
        while time.monotonic() < until:
            await asyncio.sleep(1.0)
            await asyncio.to_thread(sample)
        window.stop()

    tasks = [asyncio.ensure_future(one_client(k)) for k in range(clients)]
    await measure()
    out.window = (begin + warmup, until)
    out.wall = (out.window[0] + wall, out.window[1] + wall)
    progress(f"  the window is over: finishing the {len(tasks)} clients' runs in flight…")
    _, pending = await asyncio.wait(tasks, timeout=DRAIN)
    for task in pending:
        task.cancel()
    out.unfinished = len(pending)
    ended = await asyncio.gather(*tasks, return_exceptions=True)
    out.errors += [repr(e) for e in ended if isinstance(e, Exception)]
    return out


# -- the two sides ----------------------------------------------------------------------------


def measure_airlock(
    args: argparse.Namespace, model_url: str, model: Process, notify_url: str | None = None
) -> dict[str, Any]:
    """Airlock's side; with ``notify_url``, every run's notifications go there."""
    tmp = Path(tempfile.mkdtemp(prefix="airlock-w2-"))
    settings = dict(item.split("=", 1) for item in args.set)
    if notify_url:
        settings |= {"AIRLOCK_NOTIFY_URL": notify_url, "AIRLOCK_NOTIFY_SECRET": SECRET}
    with airlock(model_url, args.worker_args, tmp, settings) as (stack, base):
        api, worker, beat = (p.pid for p in stack.processes)
        me = os.getpid()
        window = Window(
            {
                "worker": led_by(worker),
                "api": lambda p: p.pid == api,
                "model": lambda p: p.pid == model.pid,
                "postgres": lambda p: p.command.startswith("postgres"),
                "redis": lambda p: p.command.startswith("redis-server"),
                "clients": lambda p: p.pid == me,
                "beat": lambda p: p.pid == beat,
            }
        )
        engine = create_engine(PG, pool_size=1)

        def sample() -> None:
            window.peak("worker_rss_kb", rss_kb(worker))
            window.peak("worker_pg_connections", connections(engine, WORKER_APP))
            window.peak("api_pg_connections", connections(engine, API_APP))
            window.peak("model_in_flight", model_stats(model_url)["in_flight"])

        model_stats(model_url, reset=True)
        progress(
            f"Airlock: {args.clients} clients, {args.warmup:g} s warm-up, {args.seconds:g} s"
            f" measured (logs in {tmp})…"
        )
        driven = asyncio.run(
            drive(
                base,
                args.clients,
                warmup=args.warmup,
                seconds=args.seconds,
                window=window,
                sample=sample,
                poll=args.poll,
            )
        )
        # as the last run ends: what the receiver has not had yet, the lag, the retries
        notified = outbox_figures(stack.service.store.engine) if notify_url else None
        calls = model_stats(model_url)
        statuses = {str(k): v for k, v in stack.service.store.queries.count_by_status().items()}
        answers = _answers_ping(stack)
        rss_end = rss_kb(worker)
        served = served_times(stack, driven.wall)
        engine.dispose()
        log = (tmp / "worker.log").read_text(errors="replace")
    result = summarize(driven.runs, driven.window, args.clients, args.latency)
    return result | {
        "worker_rss_peak_mb": round(window.peaks["worker_rss_kb"] / 1024, 1),
        "worker_rss_end_mb": round(rss_end / 1024, 1),
        "worker_pg_connections_peak": window.peaks["worker_pg_connections"],
        "api_pg_connections_peak": window.peaks["api_pg_connections"],
        "model_calls_in_flight_peak": window.peaks["model_in_flight"],
        "model_calls_per_run": round(calls["calls"] / max(1, len(driven.runs)), 2),
        "served_p50_s": round(statistics.median(served), 3) if served else None,
        "served_p95_s": round(pct(served, 0.95), 3) if served else None,
        "cpu_ms_per_run": per_run(window.cpu, result["runs"]),
        "worker_cpu_cores": round(window.cpu["worker"] / window.elapsed, 2),
        "host": window.host(),
        "errors": len(driven.errors),
        "unfinished": driven.unfinished,
        "runs_by_status_at_end": statuses,
        "worker_answered_ping_at_end": answers,
        "error_sample": driven.errors[:5],
        "worker_warnings": warnings(log),
        "notifications_at_last_run": notified,
    }


def measure_peer(args: argparse.Namespace, model_url: str, model: Process) -> dict[str, Any]:
    with temporary_database() as url:
        libpq = url.replace("postgresql+psycopg://", "postgresql://")
        argv = peer.langgraph_w2(
            libpq,
            f"{model_url}/v1",
            clients=args.clients,
            seconds=args.seconds,
            warmup=args.warmup,
            pool=args.peer_pool,
            poll=args.poll,
        )
        progress(f"the peer: {args.clients} clients, {args.warmup:g} s + {args.seconds:g} s…")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        window = Window(
            {
                "peer": lambda p: p.pid == proc.pid,
                "model": lambda p: p.pid == model.pid,
                "postgres": lambda p: p.command.startswith("postgres"),
            }
        )
        engine = create_engine(PG, pool_size=1)
        stop = threading.Event()

        def sample() -> None:  # the whole run long: the peak RSS
            while not stop.wait(1.0):
                window.peak("rss_kb", rss_kb(proc.pid))
                window.peak("pg_connections", _database_connections(engine, url))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            # the peer's own set-up (its imports, its pool, its first run), then its clients
            assert proc.stderr is not None
            said = []
            for line in iter(proc.stderr.readline, ""):
                if line == "clients\n":
                    break
                said.append(line)
            time.sleep(args.warmup)
            window.start()
            time.sleep(args.seconds)
            window.stop()
            out, err = proc.communicate(timeout=DRAIN + 60)
            err = "".join(said) + err
        finally:
            if proc.poll() is None:  # it did not finish in time: never left behind
                proc.kill()
                proc.wait(10)
            stop.set()
            sampler.join()
            engine.dispose()
    if proc.returncode != 0:
        raise RuntimeError(f"the peer failed ({proc.returncode}):\n{err[-3000:]}")
    data = json.loads(out)
    runs = [(a, b) for a, b in data["runs"]]
    window_clock = (data["window"][0], data["window"][1])
    result = summarize(runs, window_clock, args.clients, args.latency)
    return result | {
        "rss_peak_mb": round(window.peaks.get("rss_kb", 0) / 1024, 1),
        "pg_connections_peak": window.peaks.get("pg_connections", 0),
        "pool_size": data["pool_size"],
        "cpu_ms_per_run": per_run(window.cpu, result["runs"]),
        "cpu_cores": round(window.cpu["peer"] / window.elapsed, 2),
        "host": window.host(),
        "errors": data["error_count"],
        "error_sample": data["errors"][:5],
        "versions": peer.versions(),
    }


def _database_connections(engine: Any, url: str) -> int:
    name = url.rsplit("/", 1)[1]
    query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name")
    with engine.connect() as conn:
        return int(conn.execute(query, {"name": name}).scalar_one())


# -- the command ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per model call")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured, each side")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--worker-args", default="", help="options for `airlock worker`")
    parser.add_argument("--poll", type=float, default=POLL, help="seconds between polls")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="AIRLOCK_X=VALUE",
        help="a setting of Airlock's processes (e.g. AIRLOCK_DB_POOL_SIZE=16); repeatable",
    )
    parser.add_argument(
        "--notify",
        choices=("on", "off", "both"),
        default="both",
        help="notifications to a receiver in its own process (both: off, then on, and the"
        " ratio; the peer is compared with the 'on' side)",
    )
    parser.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--peer-pool", type=int, default=20, help="the peer's connections")
    args = parser.parse_args()
    for item in args.set:
        if not item.startswith("AIRLOCK_") or "=" not in item:
            parser.error(f"--set takes AIRLOCK_NAME=VALUE, not {item!r}")
    command = (
        f"w2 --clients {args.clients} --latency {args.latency:g} --seconds {args.seconds:g}"
        f" --warmup {args.warmup:g}"
        + (f" --worker-args {shlex.quote(args.worker_args)}" if args.worker_args else "")
        + "".join(f" --set {shlex.quote(item)}" for item in args.set)
        + (f" --poll {args.poll:g}" if args.poll != POLL else "")
        + ("" if args.peer else " --no-peer")
        + (f" --peer-pool {args.peer_pool}" if args.peer_pool != 20 else "")
        + (f" --notify {args.notify}" if args.notify != "both" else "")
    )
    load_before = [round(v, 2) for v in os.getloadavg()]
    tmp = Path(tempfile.mkdtemp(prefix="airlock-w2-model-"))
    model, model_url = fake_model(args.latency, tmp)
    hook, notify_url = receiver.start("fast") if args.notify != "off" else (None, None)
    try:
        result: dict[str, Any] = {}
        if args.notify == "both":
            result["airlock_off"] = measure_airlock(args, model_url, model)
            model_stats(model_url, reset=True)
        result["airlock"] = measure_airlock(args, model_url, model, notify_url)
        result["notify"] = args.notify
        if "airlock_off" in result:
            result["ratio_notify_on_off"] = round(
                result["airlock"]["runs_per_s"] / result["airlock_off"]["runs_per_s"], 2
            )
        if args.peer and peer.ready():
            model_stats(model_url, reset=True)
            result["peer"] = measure_peer(args, model_url, model)
        elif args.peer:
            progress(f"no peer: bench/.peer-venv is missing or stale; make it with `{peer.MAKE}`")
    finally:
        model.stop()
        if hook is not None:
            hook.stop()
    a = result["airlock"]
    if "peer" in result:
        p = result["peer"]
        result["ratio_runs_per_s"] = round(a["runs_per_s"] / p["runs_per_s"], 2)
        result["ratio_runs_per_s_little"] = round(
            a["runs_per_s_little"] / p["runs_per_s_little"], 2
        )
        result["ratio_run_p50"] = round(a["run_p50_s"] / p["run_p50_s"], 2)
    _show(args, result)
    record(
        "w2",
        command,
        result,
        rev=revision(),
        clients=args.clients,
        latency=args.latency,
        worker=" ".join(worker_command(args.worker_args)[2:]),
        loadavg_before=load_before,
    )


def _show(args: argparse.Namespace, result: dict[str, Any]) -> None:
    a = result["airlock"]
    worker = "airlock worker" + (f" {args.worker_args}" if args.worker_args else "")
    print(
        f"W2, {args.clients} clients, model {args.latency:g} s/call;"
        f" physical limit {a['physical_limit']} runs/s"
    )
    print(
        f"Airlock ({worker}): {a['runs_per_s']} runs/s ({a['of_limit']:.0%} of the limit;"
        f" C / mean run {a['runs_per_s_little']}),"
        f" run p50 {a['run_p50_s']} s p95 {a['run_p95_s']} s, worker RSS peak"
        f" {a['worker_rss_peak_mb']} MB, worker PG connections peak"
        f" {a['worker_pg_connections_peak']}, model calls in flight peak"
        f" {a['model_calls_in_flight_peak']}, {a['model_calls_per_run']} model calls/run,"
        f" in Airlock's hands p50 {a['served_p50_s']} s p95 {a['served_p95_s']} s,"
        f" worker {a['worker_cpu_cores']} cores, errors {a['errors']},"
        f" unfinished {a['unfinished']} (runs by status at the end:"
        f" {a['runs_by_status_at_end']}; the worker answered a ping:"
        f" {a['worker_answered_ping_at_end']})"
    )
    print(f"  CPU ms per run: {a['cpu_ms_per_run']}; host: {a['host']}")
    if (n := a.get("notifications_at_last_run")) is not None:
        print(
            f"  notifications ON ({n['recorded']} recorded): as the last run ended,"
            f" {n['undelivered']} not yet delivered; lag p50 {n['lag_p50_s']} s"
            f" p99 {n['lag_p99_s']} s; {n['failed_attempts']} failed attempts (retries)"
        )
    if "airlock_off" in result:
        off = result["airlock_off"]
        print(
            f"  notifications OFF: {off['runs_per_s']} runs/s; on / off"
            f" {result['ratio_notify_on_off']}x"
        )
    if "peer" in result:
        p = result["peer"]
        print(
            f"peer (LangGraph, one process): {p['runs_per_s']} runs/s ({p['of_limit']:.0%};"
            f" C / mean run {p['runs_per_s_little']}),"
            f" run p50 {p['run_p50_s']} s p95 {p['run_p95_s']} s, RSS peak {p['rss_peak_mb']} MB,"
            f" PG connections {p['pg_connections_peak']}, {p['cpu_cores']} cores,"
            f" errors {p['errors']}"
        )
        print(f"  CPU ms per run: {p['cpu_ms_per_run']}; host: {p['host']}")
        print(
            f"ratio Airlock / peer: runs/s {result['ratio_runs_per_s']}x"
            f" (C / mean run {result['ratio_runs_per_s_little']}x),"
            f" run p50 {result['ratio_run_p50']}x"
        )
        print(
            f"| {args.clients} | {a['runs_per_s']} ({a['of_limit']:.0%}) | {a['run_p50_s']} /"
            f" {a['run_p95_s']} s | {a['worker_rss_peak_mb']} MB |"
            f" {a['worker_pg_connections_peak']} | {a['cpu_ms_per_run'].get('worker')} ms |"
            f" {p['runs_per_s']} | {p['run_p50_s']} s | {p['rss_peak_mb']} MB |"
            f" {result['ratio_runs_per_s']}x |"
        )


if __name__ == "__main__":
    main()
