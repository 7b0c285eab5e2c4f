"""The providers' HTTP client alone under gevent: CPU per model call with C calls in
flight through one client, as in a ``-P gevent`` worker (W2's bottleneck at C = 200).

    .venv/bin/python -m bench.http_pool --calls 200 --rounds 5 --latency 0.5

``bench.fake_openai`` answers every call after ``--latency`` seconds; each client
runs in a process of its own, patched by gevent first (``monkey.patch_all()``, as
``airlock worker -P gevent``): ``--calls`` greenlets, each making ``--rounds`` calls one
after another on the one client (after a round to open the connections, not counted).
Prints, for each client, the process's CPU per call (user + system), the calls/s and
the calls in flight at most (the server's count); appends them to
bench/results/http_pool.jsonl.

The clients: ``httpx`` (httpx's own transport, httpcore's pool, the providers' limits),
``urllib3`` (``airlock.providers.transport.Urllib3Transport`` under the same ``httpx.Client``),
``httpx2`` (the fork, same limits), ``httpx:N`` (httpx's own pool capped at N
connections: the other calls wait for one), and ``providers`` (``providers.http.client()``,
whatever it is).
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
import time
from typing import Any

import httpx

from airlock.workers.testing import free_port, wait_for
from bench.common import progress, record

CLIENTS = ("httpx", "urllib3", "httpx2", "providers")
BODY = {"model": "fake", "messages": [{"role": "user", "content": "mail a"}], "tools": []}


def make(name: str) -> Any:
    """A client by name (see the module's docstring), with the providers' limits."""
    from airlock.providers import http  # noqa: PLC0415 - after gevent's patching

    limits = {"max_connections": None, "max_keepalive_connections": 256, "keepalive_expiry": 60}
    if name == "httpx":
        return httpx.Client(limits=httpx.Limits(**limits))
    if name.startswith("httpx:"):  # httpx's own pool capped at that many connections
        cap = int(name.removeprefix("httpx:"))
        return httpx.Client(limits=httpx.Limits(max_connections=cap, keepalive_expiry=60))
    if name == "urllib3":
        from airlock.providers.transport import Urllib3Transport  # noqa: PLC0415

        return httpx.Client(transport=Urllib3Transport())
    if name == "httpx2":
        import httpx2  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415

        return httpx2.Client(limits=httpx2.Limits(**limits))
    return http.client()


def child(name: str, url: str, calls: int, rounds: int) -> dict[str, float]:
    """Runs in the gevent-patched child: the measurement of one client."""
    import gevent  # type: ignore[import-untyped]  # noqa: PLC0415

    client = make(name)

    def call() -> None:
        answer = client.post(url, json=BODY, timeout=60)
        answer.raise_for_status()
        answer.json()

    def calls_one_after_another(n: int) -> None:
        for _ in range(n):
            call()

    gevent.joinall([gevent.spawn(call) for _ in range(calls)], raise_error=True)  # opens them
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    gevent.joinall(
        [gevent.spawn(calls_one_after_another, rounds) for _ in range(calls)], raise_error=True
    )
    after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - started
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    n = calls * rounds
    return {"cpu_ms_per_call": round(cpu / n * 1000, 3), "calls_per_s": round(n / elapsed, 1),
            "cores": round(cpu / elapsed, 2)}  # fmt: skip


def measure(name: str, base: str, calls: int, rounds: int) -> dict[str, Any]:
    httpx.post(f"{base}/stats/reset")
    code = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import json, sys, bench.http_pool as m\n"
        "print(json.dumps(m.child(*sys.argv[1:3], *map(int, sys.argv[3:5]))))"
    )
    argv = [sys.executable, "-c", code, name, f"{base}/v1/chat/completions"]
    argv += [str(calls), str(rounds)]
    out = subprocess.run(argv, check=False, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["max_in_flight"] = httpx.get(f"{base}/stats").json()["max_in_flight"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls in flight at once")
    parser.add_argument("--rounds", type=int, default=5, help="calls each greenlet makes")
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args()
    port = free_port()
    fake = ["-m", "bench.fake_openai", "--port", str(port), "--latency", str(args.latency)]
    server = subprocess.Popen([sys.executable, *fake])
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for("the fake model", lambda: _answers(base))
        results = {}
        for name in args.clients.split(","):
            progress(f"{name}: {args.calls} calls in flight, {args.rounds} rounds…")
            results[name] = measure(name, base, args.calls, args.rounds)
            progress(f"  {results[name]}")
    finally:
        server.terminate()
        server.wait()
    record("http_pool", f"http_pool {shlex.join(sys.argv[1:])}", results,
           calls=args.calls, rounds=args.rounds, latency=args.latency)  # fmt: skip


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/stats", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
