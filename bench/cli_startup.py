"""How long the ``airlock`` command takes to answer (issue 47, item 2): ``--help``,
``stats`` and ``health beat`` on an empty embedded database (SQLite, in a temporary
folder), each run ``--runs`` times; wall and CPU time (the CPU time is the process's
own: a loaded host moves the wall time, less so the CPU's). The targets: ``--help``
under 0.3 s, ``stats`` and ``health`` well under a second. And how long ``airlock dev``
takes to stop on Ctrl-C (item 8: under 2 s), from the SIGINT to its exit.

    .venv/bin/python -m bench.cli_startup [--runs 7]

Prints the medians and appends them, with the command, to bench/results/cli_startup.jsonl.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import record

COMMANDS = (["--help"], ["stats"], ["health", "beat"], ["runs", "list"])


def timed(args: list[str], folder: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one ``airlock ARGS`` in ``folder``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "airlock.workers", *args],
        cwd=folder, env=env, capture_output=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def dev_stop(folder: Path) -> float:
    """Seconds from Ctrl-C (SIGINT) to ``airlock dev``'s exit, its API having answered."""
    import httpx  # noqa: PLC0415 - only for this measure

    from airlock.workers.cli.demo import free_port, poll  # noqa: PLC0415

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    dev = subprocess.Popen(
        [sys.executable, "-m", "airlock.workers", "dev", "--port", str(port)],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    poll("airlock dev", up, 120)
    time.sleep(3)  # its worker and beat started too
    start = time.perf_counter()
    dev.send_signal(signal.SIGINT)
    dev.wait(120)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, "-m", "airlock.workers", "db", "upgrade"], cwd=folder,
                       capture_output=True, check=True)  # fmt: skip
        for args in COMMANDS:
            samples = [timed(args, folder) for _ in range(runs)]
            name = " ".join(args)
            results[name] = {
                "wall_median_s": round(statistics.median(w for w, _ in samples), 3),
                "cpu_median_s": round(statistics.median(c for _, c in samples), 3),
            }
            print(f"airlock {name:<12} wall {results[name]['wall_median_s']:.3f} s, "
                  f"cpu {results[name]['cpu_median_s']:.3f} s (median of {runs})")  # fmt: skip
        stops = [dev_stop(folder) for _ in range(max(1, runs // 2))]
        results["dev_stop"] = {"wall_median_s": round(statistics.median(stops), 3)}
        print(f"airlock dev stop   wall {results['dev_stop']['wall_median_s']:.3f} s "
              f"(median of {len(stops)})")  # fmt: skip
    record("cli_startup", f"cli_startup --runs {runs}", results, runs=runs)


if __name__ == "__main__":
    main()
