"""Checkpoint + resume by transcript size: suspend a run whose transcript is 10 KB,
100 KB or 1 MB, record the decision, claim it, load and verify the state, and resume
the loop to completion — on the local PostgreSQL.

    .venv/bin/python -m bench.transcript [--quick]

Prints each size's median and its ratio to 10 KB; appends to bench/results/transcript.jsonl.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from airlock.loop import Approve, LoopResult, ToolLoop
from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from bench.agents import MAILER
from bench.checkpoint import SIZES, state_of_size
from bench.common import progress, record, temporary_database

LEASE = timedelta(seconds=60)


def checkpoint_and_resume(repo: RunStore, size: int) -> float:
    run, _ = repo.runs.create("w1", "x")
    repo.transitions.claim(run.id, "bench", LEASE)
    state = state_of_size(run.id, size)
    start = time.perf_counter()
    repo.transitions.suspend(run.id, "bench", state, expires_at=None)
    repo.decisions.record_decision(run.id, state.turn_digest, {"decision": "approve"})
    claimed = repo.transitions.claim(run.id, "bench", LEASE)
    assert claimed is not None
    result: LoopResult = ToolLoop().resume(MAILER, repo.runs.load_state(claimed), Approve())
    elapsed = time.perf_counter() - start
    assert result.output == "done"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps = 10 if args.quick else 50
    medians: dict[str, float] = {}
    with temporary_database() as url:
        engine = make_engine(url)
        repo = RunStore(engine)
        for label, size in SIZES.items():
            progress(f"[{label}] {reps} checkpoint+resume…")
            checkpoint_and_resume(repo, size)
            medians[label] = statistics.median(
                checkpoint_and_resume(repo, size) for _ in range(reps)
            )
        engine.dispose()
    base = medians["10KB"]
    rows = [
        {"size": k, "median_ms": round(v * 1000, 2), "ratio_to_10KB": round(v / base, 2)}
        for k, v in medians.items()
    ]
    for row in rows:
        print(f"{row['size']:>6} {row['median_ms']:>9.2f} ms  {row['ratio_to_10KB']:>6.2f}x")
    quick = " --quick" if args.quick else ""
    record("transcript", f"transcript{quick}", rows, repetitions=reps)


if __name__ == "__main__":
    main()
