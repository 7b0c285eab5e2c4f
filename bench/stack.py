"""End-to-end benchmarks through the real HTTP API and a real worker (2 processes) on the
local Redis and PostgreSQL.

    .venv/bin/python -m bench.stack w1 [--quick]         # runs/s and approve→completed
    .venv/bin/python -m bench.stack parking [--quick]    # a fresh run with 10,000 waiting
    .venv/bin/python -m bench.stack endurance [--quick]  # worker RSS over 10,000 runs
    .venv/bin/python -m bench.stack webhook [--quick]    # approval webhook vs /healthz

``--pool prefork`` runs the worker as ``airlock worker -P prefork`` (one Celery worker
with a prefork pool) instead of ``airlock worker``'s default pool.

Each prints its ratios and appends them, with the command, to bench/results/stack.jsonl.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlalchemy import text

import bench.http
from airlock.persistence.domain import RunStatus
from airlock.workers.cli.demo import signed_request
from airlock.workers.testing import SECRET, TOKEN, Process, Stack, airlock_env, free_port, wait_for
from bench.checkpoint import state_of_size
from bench.common import REDIS, progress, record, temporary_database

AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_OPTIONS: list[str] = []
AnyClient = httpx.Client | bench.http.Client


def bench_config(database: str, broker: str, tmp: Path) -> dict[str, str]:
    """A deployment's settings: the benchmarks' agents, a webhook secret and a token."""
    return {
        "AIRLOCK_DATABASE_URL": database,
        "AIRLOCK_BROKER_URL": broker,
        "AIRLOCK_AGENTS": "bench.agents:AGENTS",
        "AIRLOCK_HOME": str(tmp / "home"),
        "AIRLOCK_WEBHOOK_SECRET": SECRET,
        "AIRLOCK_API_TOKEN": TOKEN,
    }


@contextmanager
def deployment(settings: dict[str, str] | None = None) -> Iterator[tuple[Stack, str, Process]]:
    """An API process and ``airlock worker`` on the local Redis and a fresh PostgreSQL
    database; ``settings``: more of the deployment's environment (``AIRLOCK_NOTIFY_URL``:
    the worker's dispatcher delivers the notifications)."""
    redis.Redis.from_url(REDIS).flushdb()
    tmp = Path(tempfile.mkdtemp(prefix="airlock-bench-"))
    with temporary_database() as url:
        config = bench_config(url, REDIS, tmp) | (settings or {})
        with _processes(config, tmp) as running:
            yield running


@contextmanager
def _processes(config: dict[str, str], tmp: Path) -> Iterator[tuple[Stack, str, Process]]:
    stack = Stack(config, tmp)
    port = free_port()
    api = Process(
        "api",
        [sys.executable, "-m", "airlock.workers", "api", "--port", str(port), *API_OPTIONS],
        airlock_env(config, stack.outbox),
        tmp / "api.log",
    ).start()
    stack.processes.append(api)
    base = f"http://127.0.0.1:{port}"
    wait_for("the API", lambda: up(base), timeout=30)
    worker = Process(
        "w1", airlock_worker("w1", "--include", "bench.trace"), api.env, tmp / "w1.log"
    ).start()
    stack.processes.append(worker)
    wait_answers(stack)
    try:
        yield stack, base, worker
    finally:
        stack.close()


WORKER_OPTIONS: list[str] = []
"""More ``airlock worker`` options for every benchmark's worker (``--pool prefork``:
``-P prefork -c 2``, the worker the issues measured before gevent was the default)."""


def airlock_worker(name: str, *extra: str) -> list[str]:
    """``airlock worker`` as a user runs it: its default pool and concurrency (on Redis,
    ``-P gevent -c 200``), Celery's default log level (WARNING), so no line per task is
    written. ``extra`` goes to ``celery worker`` (``--include bench.trace`` loads the
    trace points)."""
    return [
        sys.executable, "-m", "airlock.workers", "worker", "-n", f"{name}@%h",
        *WORKER_OPTIONS, *extra,
    ]  # fmt: skip


def wait_answers(stack: Stack, timeout: float = 30.0, answering: int = 1) -> None:
    """Until ``answering`` workers on the stack's broker answer a ping (at WARNING, a
    worker logs no "ready." line to wait for)."""
    wait_for(
        f"{answering} worker(s) to answer a ping",
        lambda: len(stack.celery.control.ping(timeout=0.5) or []) >= answering,
        timeout=timeout,
    )


def up(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def status(client: AnyClient, base: str, run_id: str) -> dict[str, Any]:
    view: dict[str, Any] = client.get(f"{base}/v1/runs/{run_id}", headers=AUTH).json()
    return view


def w1_waiting(client: AnyClient, base: str) -> tuple[str, str, bytes, dict[str, str]]:
    """A W1 run created over HTTP and polled (every 2 ms) until it waits: its id and
    the signed approval of its turn (path, content, headers)."""
    run_id = client.post(
        f"{base}/v1/runs", json={"agent": "w1", "input": "go"}, headers=AUTH
    ).json()["id"]
    waiting = wait_for(
        "waiting",
        lambda: (v := status(client, base, run_id))["status"] == "waiting_for_approval" and v,
        interval=0.002,
    )
    body = {"turn_digest": waiting["pending"]["turn_digest"], "decision": "approve"}
    return run_id, *signed_request(f"/v1/runs/{run_id}/approval", body, SECRET)


def w1_once(client: AnyClient, base: str) -> tuple[float, float]:
    """One W1 run over HTTP: (create → completed seconds, approve → completed seconds)."""
    start = time.perf_counter()
    run_id, path, content, headers = w1_waiting(client, base)
    approved = time.perf_counter()
    assert client.post(f"{base}{path}", content=content, headers=headers).status_code == 202
    wait_for(
        "completed",
        lambda: status(client, base, run_id)["status"] == "completed",
        interval=0.002,
    )
    end = time.perf_counter()
    return end - start, end - approved


def throughput(
    base: str, clients: int, runs: int, client: Callable[[], AnyClient] = bench.http.Client
) -> float:
    """W1 runs per second, create → completed, with ``clients`` clients at a time, each
    on its own connection (made by ``client``) driving runs one after another."""
    each = runs // clients
    connections = [client() for _ in range(clients)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda c: [w1_once(c, base) for _ in range(each)], connections))
    elapsed = time.perf_counter() - started
    for c in connections:
        c.close()
    return clients * each / elapsed


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def bench_w1(quick: bool) -> dict[str, Any]:
    n = 20 if quick else 200
    with deployment() as (_, base, _worker), httpx.Client() as client:
        w1_once(client, base)  # warm up
        progress(f"w1: {n} runs over HTTP, one at a time…")
        samples = [w1_once(client, base) for _ in range(n)]
        progress("w1: throughput, 4 clients at a time…")
        rate = throughput(base, 4, n, client=httpx.Client)  # as recorded since issue 8
    approve = [b for _, b in samples]
    return {
        "runs": n,
        "create_to_completed_p50_ms": round(statistics.median(a for a, _ in samples) * 1000, 1),
        "approve_to_completed_p50_ms": round(statistics.median(approve) * 1000, 1),
        "approve_to_completed_p99_ms": round(pct(approve, 0.99) * 1000, 1),
        "runs_per_s_4_clients": round(rate, 1),
    }


def bench_parking(quick: bool) -> dict[str, Any]:
    parked = 1000 if quick else 10_000
    m = 10 if quick else 50
    with deployment() as (stack, base, _worker), httpx.Client() as client:
        progress(f"parking: {m} warm-up runs, then {m} fresh W1 runs with none waiting…")
        for _ in range(m):  # the workers' and the API's connections and caches warm
            w1_once(client, base)
        _settle(stack, client, base)
        empty = [w1_once(client, base)[0] for _ in range(m)]
        repo = stack.service.store
        size_before = _db_size(stack)
        progress(f"parking: parking {parked} runs at approval (direct inserts)…")
        lease = stack.service.limits.lease
        for i in range(parked):
            run, _ = repo.runs.create("w1", "parked")
            repo.transitions.claim(run.id, "bench", lease)
            repo.transitions.suspend(run.id, "bench", state_of_size(run.id, 2_000), None)
            if i % 1000 == 999:
                progress(f"  {i + 1}/{parked}")
        assert repo.queries.count_by_status()[RunStatus.WAITING_FOR_APPROVAL] >= parked
        size_after = _db_size(stack)
        _settle(stack, client, base)
        progress(f"parking: {m} fresh W1 runs with {parked} waiting…")
        full = [w1_once(client, base)[0] for _ in range(m)]
    return {
        "parked": parked,
        "fresh_run_p50_ms_none_waiting": round(statistics.median(empty) * 1000, 1),
        "fresh_run_p50_ms_with_parked": round(statistics.median(full) * 1000, 1),
        "latency_ratio": round(statistics.median(full) / statistics.median(empty), 2),
        "db_bytes_per_waiting_run": round((size_after - size_before) / parked),
    }


def _settle(stack: Stack, client: httpx.Client, base: str) -> None:
    """What autovacuum does soon after a burst of writes (here, parking 10,000 runs in
    seconds), done before each measure, so that both see the tables as they settle
    and neither sees autovacuum at work; then 10 runs unmeasured, as the new
    statistics make the server plan its statements anew."""
    engine = stack.service.store.engine.execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("VACUUM ANALYZE"))
    for _ in range(10):
        w1_once(client, base)


def _db_size(stack: Stack) -> int:
    with stack.service.store.engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())


def rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants."""
    total = 0
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{p}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def bench_endurance(quick: bool) -> dict[str, Any]:
    n = 500 if quick else 10_000
    with deployment() as (stack, _base, worker):
        assert worker.proc is not None
        warm = 100
        progress(f"endurance: {warm} warm-up runs…")
        _instant_runs(stack, warm)
        start_rss = rss_kb(worker.proc.pid)
        progress(f"endurance: {n} runs (worker RSS at start {start_rss} kB)…")
        _instant_runs(stack, n)
        end_rss = rss_kb(worker.proc.pid)
    return {
        "runs": n,
        "worker_rss_start_kb": start_rss,
        "worker_rss_end_kb": end_rss,
        "rss_growth_ratio": round(end_rss / start_rss, 3),
    }


def _instant_runs(stack: Stack, n: int) -> None:
    repo = stack.service.store
    done = repo.queries.count_by_status()[RunStatus.COMPLETED]
    for i in range(n):
        stack.service.start_run("instant", "go")
        if i % 1000 == 999:
            progress(f"  {i + 1}/{n} queued")
    wait_for(
        "the runs",
        lambda: repo.queries.count_by_status()[RunStatus.COMPLETED] >= done + n,
        timeout=3600,
        interval=0.1,
    )


def bench_webhook(quick: bool) -> dict[str, Any]:
    """Signed approval webhooks against the app's most trivial endpoint, interleaved
    request by request on one connection, then each with 4 clients at once."""
    n = 200 if quick else 2000
    with deployment() as (stack, base, worker):
        worker.stop()  # the resumes wait in the broker: only the API is measured
        progress(f"webhook: parking {2 * n} runs at approval…")
        requests = [_signed_approval(stack, i) for i in range(2 * n)]
        sequential, concurrent = requests[:n], requests[n:]
        with httpx.Client(base_url=base) as client:
            for _ in range(20):  # warm up
                client.get("/healthz")
            progress(f"webhook: {n} approvals and {n} /healthz, interleaved…")
            approval_s: list[float] = []
            trivial_s: list[float] = []
            for path, content, headers in sequential:
                approval_s.append(_timed_post(client, path, content, headers))
                trivial_s.append(_timed_get(client, "/healthz"))
        progress(f"webhook: throughput, {n} of each with 4 clients…")
        approvals_per_s = _throughput(base, [partial(_post, r) for r in concurrent])
        trivial_per_s = _throughput(base, [lambda c: c.get("/healthz")] * n)
        waiting = stack.service.store.queries.count_by_status()[RunStatus.WAITING_FOR_APPROVAL]
        assert waiting == 0, f"{waiting} approvals were not applied"
    return {
        "approvals": 2 * n,
        "approval_p50_ms": round(statistics.median(approval_s) * 1000, 2),
        "approval_p99_ms": round(pct(approval_s, 0.99) * 1000, 2),
        "healthz_p50_ms": round(statistics.median(trivial_s) * 1000, 2),
        "healthz_p99_ms": round(pct(trivial_s, 0.99) * 1000, 2),
        "p50_ratio": round(statistics.median(approval_s) / statistics.median(trivial_s), 2),
        "p99_ratio": round(pct(approval_s, 0.99) / pct(trivial_s, 0.99), 2),
        "approvals_per_s_4_clients": round(approvals_per_s, 1),
        "healthz_per_s_4_clients": round(trivial_per_s, 1),
        "throughput_ratio": round(trivial_per_s / approvals_per_s, 2),
    }


Request = tuple[str, bytes, dict[str, str]]


def _signed_approval(stack: Stack, i: int) -> Request:
    """A run parked at approval (direct inserts) and its signed approval, ready to send."""
    repo = stack.service.store
    run, _ = repo.runs.create("w1", "parked")
    repo.transitions.claim(run.id, "bench", stack.service.limits.lease)
    state = state_of_size(run.id, 2_000)
    repo.transitions.suspend(run.id, "bench", state, None)
    if i % 500 == 499:
        progress(f"  {i + 1}")
    return signed_request(f"/v1/runs/{run.id}/approval", _approve(state.turn_digest), SECRET)


def _approve(digest: str) -> dict[str, Any]:
    return {"turn_digest": digest, "decision": "approve", "approver": "bench"}


def _post(request: Request, client: httpx.Client) -> httpx.Response:
    path, content, headers = request
    return client.post(path, content=content, headers=headers)


def _timed_post(client: httpx.Client, path: str, content: bytes, headers: dict[str, str]) -> float:
    start = time.perf_counter()
    response = client.post(path, content=content, headers=headers)
    elapsed = time.perf_counter() - start
    assert response.status_code == 202, response.text
    return elapsed


def _timed_get(client: httpx.Client, path: str) -> float:
    start = time.perf_counter()
    response = client.get(path)
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.text
    return elapsed


def _throughput(base: str, calls: list[Any]) -> float:
    """Requests per second with 4 clients, each on its own connection."""
    clients = [httpx.Client(base_url=base) for _ in range(4)]
    chunks = [calls[i::4] for i in range(4)]

    def drive(k: int) -> None:
        for call in chunks[k]:
            response = call(clients[k])
            assert response.status_code in (200, 202), response.text

    start = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(drive, range(4)))
    elapsed = time.perf_counter() - start
    for c in clients:
        c.close()
    return len(calls) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["w1", "parking", "endurance", "webhook"])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--pool",
        help="run the worker as `airlock worker -P POOL -c 2` (e.g. prefork) instead of "
        "its default pool (gevent, -c 200)",
    )
    args = parser.parse_args()
    if args.pool:
        WORKER_OPTIONS[:] = ["-P", args.pool, "-c", "2"]
    benchmarks = {
        "w1": bench_w1,
        "parking": bench_parking,
        "endurance": bench_endurance,
        "webhook": bench_webhook,
    }
    result = benchmarks[args.which](args.quick)
    for key, value in result.items():
        print(f"{key:>32}: {value}")
    command = f"stack {args.which}" + (" --quick" if args.quick else "")
    record("stack", command + (f" --pool {args.pool}" if args.pool else ""), result)


if __name__ == "__main__":
    main()
