"""Parked runs at scale (issue 46): what a resume, the sweeper, the queue, a search,
``/metrics`` and ``airlock stats`` cost with 0, 10k, 100k (and, by flag, 1M) runs
waiting for approval on PostgreSQL.

    .venv/bin/python -m bench.parked [--sizes 0,10000,100000] [--resumes 100]

The waiting runs are seeded in bulk (one ``INSERT … SELECT generate_series``, not
through the API); the triggers of migration 0011 count them as any write. At each size,
in this process (no broker, no HTTP: the statements and Airlock's code, not the
transport): W1 runs are started and parked, then resumed one after another (the
decision recorded, then the resumed segment run to completion), with no queue stream
open and then with one open (a thread reading the queue's mark every ``TICK`` as the
API's hub does for every open ``/v1/approvals/stream`` or ``/inbox/stream``), in
alternating rounds. Also timed: the sweeper's tick and the expiry's, the queue's first
page, searches (of text a few runs hold, none, many, and two letters none holds: too
short for trigrams, the worst case), what a ``/metrics`` scrape reads, what ``airlock
stats`` reads, and for comparison the reads these replaced (counting the runs). Prints
the figures against the targets and appends them, with the command, to
bench/results/parked.jsonl.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy import Engine, text

from airlock.persistence.db import make_engine
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.http.hub import TICK
from airlock.workers.service import Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry
from bench.agents import AGENTS
from bench.common import progress, record, temporary_database

OPERATOR = Principal.trusted("bench")
SEARCH_HIT = "needle-7"
"""Text in the metadata of one seeded run in 10,000."""

SEED = """
INSERT INTO agent_runs (id, agent, status, input, iterations, prompt_tokens,
    completion_tokens, turn_digest, suspended_at, expires_at, attempts, event_seq,
    metadata, created_at, updated_at, version)
SELECT gen_random_uuid(), 'w1', 'waiting_for_approval', 'mail', 1, 10, 2,
    md5(i::text) || md5(i::text), now() - interval '1 hour' + i * interval '1 ms',
    now() + interval '30 days', 1, 2,
    json_build_object('ticket', 'T-' || i, 'team', 'team-' || (i % 50),
        'tag', CASE WHEN i % 10000 = 7 THEN CAST(:hit AS text) ELSE 'plain' END),
    now() - interval '1 hour' + i * interval '1 ms',
    now() - interval '1 hour' + i * interval '1 ms', 1
FROM generate_series(CAST(:start AS integer), CAST(:stop AS integer)) AS i
"""

REPLACED = {
    "mark_by_counting_ms": "SELECT count(*), max(updated_at), coalesce(sum(event_seq), 0)"
    " FROM agent_runs WHERE status = 'waiting_for_approval'",
    "by_status_by_counting_ms": "SELECT status, count(*) FROM agent_runs GROUP BY status",
}
"""The reads the tallies replaced (``waiting_mark`` and ``count_by_status`` before 0011)."""

ROUNDS = 5
"""Resumes are measured in this many rounds, each with no stream open then with one."""

TARGETS = {
    "resume_p99_stream_over_none": 1.5,
    "sweep_tick_ms": 100.0,
    "metrics_ms": 100.0,
    "stats_ms": 1000.0,
    "search_ms": 100.0,
}


def seed(engine: Engine, waiting: int) -> None:
    """Up to ``waiting`` runs waiting (in batches of 100k, each its own transaction)."""
    with engine.connect() as conn:
        have = conn.execute(
            text("SELECT count(*) FROM agent_runs WHERE status = 'waiting_for_approval'")
        ).scalar_one()
    start = int(have) + 1
    while start <= waiting:
        stop = min(waiting, start + 99_999)
        with engine.begin() as conn:
            conn.execute(text(SEED), {"start": start, "stop": stop, "hit": SEARCH_HIT})
        start = stop + 1
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE agent_runs"))
        conn.execute(text("ANALYZE outbox"))


def timed_ms(work: Callable[[], object], times: int = 5) -> float:
    """The median of ``times`` runs of ``work``, in milliseconds."""
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        work()
        spent.append((time.perf_counter() - start) * 1000)
    return round(sorted(spent)[len(spent) // 2], 2)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def parked_w1(service: Service, n: int) -> list[tuple[str, str]]:
    """``n`` W1 runs started and run to their approval: (run id, turn digest) each."""
    out = []
    for _ in range(n):
        run, _ = service.start_run("w1", "mail")
        service.run_segment(run.id, "bench")
        waiting = service.get_run(run.id)
        assert waiting.status is RunStatus.WAITING_FOR_APPROVAL, waiting.status
        out.append((run.id, waiting.turn_digest or ""))
    return out


def resumes_ms(service: Service, n: int) -> list[float]:
    """Each of ``n`` parked runs approved and its resumed segment run to completion."""
    spent = []
    for run_id, digest in parked_w1(service, n):
        start = time.perf_counter()
        body = DecisionBody(turn_digest=digest, decision="approve")
        service.record_decision(run_id, body, OPERATOR)
        service.run_segment(run_id, "bench")
        spent.append((time.perf_counter() - start) * 1000)
        assert service.get_run(run_id).status is RunStatus.COMPLETED
    return spent


class QueueStream:
    """An open queue stream, as the API's hub serves it: the mark read every ``TICK``."""

    def __init__(self, service: Service) -> None:
        self._service = service
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.reads = 0

    def _run(self) -> None:
        while not self._stop.wait(TICK):
            self._service.waiting_mark()
            self.reads += 1

    def __enter__(self) -> QueueStream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def sizes(engine: Engine) -> dict[str, int]:
    """Table and index sizes in bytes (``agent_runs``, ``run_tallies``, ``outbox``), and
    each index of ``agent_runs``."""
    query = text(
        "SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c"
        " WHERE c.relname IN ('agent_runs', 'run_tallies', 'outbox')"
    )
    indexes = text(
        "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
        " WHERE relname = 'agent_runs'"
    )
    with engine.connect() as conn:
        out = {}
        for name, table, index in conn.execute(query):
            out[f"{name}_table_bytes"] = int(table)
            out[f"{name}_indexes_bytes"] = int(index)
        for name, size in conn.execute(indexes):
            out[f"index_{name}_bytes"] = int(size)
    return out


def first_page(reads: RunStore, search: str | None = None) -> int:
    """The inbox queue's first page (oldest first), with its search, as the inbox asks."""
    page = reads.queries.list_runs(
        status=RunStatus.WAITING_FOR_APPROVAL,
        oldest_first=True,
        limit=25,
        metadata_contains=search,
    )
    return len(page.runs)


def measure(service: Service, engine: Engine, resumes: int) -> dict[str, Any]:
    reads = service.reader
    none: list[float] = []
    with_stream: list[float] = []
    streams = []
    for _ in range(ROUNDS):  # alternated, so that the host's load moves both alike
        none += resumes_ms(service, max(1, resumes // ROUNDS))
        with QueueStream(service) as stream:
            with_stream += resumes_ms(service, max(1, resumes // ROUNDS))
        streams.append(stream.reads)
    figures: dict[str, Any] = {
        "resume_p50_ms": pct(none, 0.5),
        "resume_p99_ms": pct(none, 0.99),
        "resume_stream_p50_ms": pct(with_stream, 0.5),
        "resume_stream_p99_ms": pct(with_stream, 0.99),
        "stream_mark_reads": sum(streams),
        "mark_ms": timed_ms(service.waiting_mark),
        "sweep_tick_ms": timed_ms(service.sweep),
        "expiry_tick_ms": timed_ms(service.expire_approvals),
        "queue_first_page_ms": timed_ms(lambda: first_page(reads)),
        "search_ms": timed_ms(lambda: first_page(reads, SEARCH_HIT)),
        "search_none_ms": timed_ms(lambda: first_page(reads, "no-such-text")),
        "search_common_ms": timed_ms(lambda: first_page(reads, "team-4")),
        "search_short_ms": timed_ms(lambda: first_page(reads, "zq")),
        "metrics_ms": timed_ms(lambda: service.stats(finished_within=())),
        "stats_ms": timed_ms(service.stats),
    }
    with engine.connect() as conn:
        for name, query in REPLACED.items():
            figures[name] = timed_ms(partial(conn.execute, text(query)), times=3)
    figures["resume_p99_stream_over_none"] = round(
        figures["resume_stream_p99_ms"] / max(figures["resume_p99_ms"], 1e-9), 2
    )
    return figures | sizes(engine)


def verdicts(figures: dict[str, Any]) -> dict[str, bool]:
    return {name: figures[name] <= limit for name, limit in TARGETS.items()}


def run(sizes_wanted: list[int], resumes: int) -> list[dict[str, Any]]:
    out = []
    with temporary_database() as url:
        engine = make_engine(url)
        repo = RunStore(engine)
        service = Service(store=repo, registry=Registry(AGENTS), enqueue=lambda r, d=None: None)
        for waiting in sizes_wanted:
            progress(f"seeding {waiting:,} waiting runs…")
            started = time.perf_counter()
            seed(engine, waiting)
            seeded_s = round(time.perf_counter() - started, 1)
            progress(f"measuring at {waiting:,} waiting…")
            figures = {"waiting": waiting, "seed_s": seeded_s} | measure(service, engine, resumes)
            figures["targets_met"] = verdicts(figures)
            out.append(figures)
            show(figures)
        engine.dispose()
    return out


def show(figures: dict[str, Any]) -> None:
    print(f"--- {figures['waiting']:,} waiting (seeded in {figures['seed_s']} s)")
    for name, value in figures.items():
        if name in ("waiting", "seed_s", "targets_met") or name.startswith("index_"):
            continue
        limit = TARGETS.get(name)
        mark = (
            ""
            if limit is None
            else f"  (target <= {limit}: " + ("met)" if value <= limit else "NOT met)")
        )
        print(f"{name:>32}: {value}{mark}")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="0,10000,100000", help="waiting runs at each step (1000000: issue 46's)"
    )
    parser.add_argument("--resumes", type=int, default=100, help="runs resumed per measure")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args(argv)
    wanted = sorted(int(s) for s in args.sizes.split(","))
    results = run(wanted, args.resumes)
    if not args.no_record:
        command = "parked " + " ".join(sys.argv[1:] if argv is None else argv)
        record("parked", command.strip(), results, resumes=args.resumes)
    return results


if __name__ == "__main__":
    main()
