"""On PostgreSQL, what grows with the runs that wait is read through an index (issue 46):
the oldest waiting run, the queue's first page, a search of the waiting runs, the
outbox's due claim and given-up count. Each statement the store sends is explained with
sequential scans disabled, on a table of 3,000 waiting runs with statistics."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from airlock.persistence.db import make_engine
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from tests.contract.helpers import sent_to_postgres

SEED = """
INSERT INTO agent_runs (id, agent, status, input, iterations, prompt_tokens,
    completion_tokens, suspended_at, attempts, event_seq, metadata, created_at,
    updated_at, version)
SELECT gen_random_uuid(), 'mailer', CASE WHEN i % 4 = 0 THEN 'completed'
    ELSE 'waiting_for_approval' END, 'x', 1, 0, 0, now() - i * interval '1 s', 1, 2,
    json_build_object('ticket', 'T-' || i, 'tag', CASE WHEN i = 77 THEN 'needle' END),
    now() - i * interval '1 s', now() - i * interval '1 s', 1
FROM generate_series(1, 4000) AS i;
INSERT INTO outbox (run_id, event_type, webhook_id, created_at, due_at, attempts,
    delivered_at)
SELECT id, 'run.completed', md5(id::text), now(), NULL, 1,
    CASE WHEN random() < 0.99 THEN now() END
FROM agent_runs;
"""


@pytest.fixture
def repo(postgres_url: str) -> Iterator[RunStore]:
    engine = make_engine(postgres_url)
    with engine.begin() as conn:
        for statement in SEED.split(";")[:-1]:
            conn.execute(text(statement))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE agent_runs"))
        conn.execute(text("ANALYZE outbox"))
    yield RunStore(engine)
    engine.dispose()


def plans(
    repo: RunStore,
    monkeypatch: pytest.MonkeyPatch,
    read: Callable[[], object],
    without: tuple[str, ...] = (),
) -> str:
    """The plans of the statements ``read`` sends, sequential scans disabled (and the
    indexes ``without`` names dropped, in a transaction rolled back)."""
    with sent_to_postgres(monkeypatch, ("agent_runs", "outbox")) as sent:
        read()
    assert sent
    with repo.engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        with driver.transaction(force_rollback=True):
            driver.execute("SET LOCAL enable_seqscan = off")
            for index in without:
                driver.execute(f"DROP INDEX {index}")
            return "\n\n".join(
                "\n".join(row[0] for row in driver.execute("EXPLAIN " + statement, params))
                for statement, params in sent
            )


def test_the_oldest_waiting_run_is_read_from_its_index(
    repo: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plans(repo, monkeypatch, repo.queries.oldest_waiting)
    assert "ix_agent_runs_waiting_since" in plan and "Seq Scan" not in plan, plan


def test_the_queues_first_page_is_read_from_its_index(
    repo: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def first_page() -> object:
        return repo.queries.list_runs(
            status=RunStatus.WAITING_FOR_APPROVAL, oldest_first=True, limit=25
        )

    plan = plans(repo, monkeypatch, first_page)
    assert "ix_agent_runs_waiting_created" in plan and "Seq Scan" not in plan, plan


def test_a_search_of_the_waiting_runs_reads_the_trigram_index(
    repo: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement can be served by the trigram index (its expression and predicate
    match the index's). On this small table the planner would rather read every waiting
    run through another partial index, so those are set aside; at 100k waiting runs it
    chooses the trigram index by itself (``bench/parked.py``: the search in ~2 ms)."""
    found: list[str] = []

    def search() -> object:
        page = repo.queries.list_runs(
            status=RunStatus.WAITING_FOR_APPROVAL,
            oldest_first=True,
            limit=25,
            metadata_contains="NEEDLE",
        )
        found.extend(r.id for r in page.runs)
        return page

    others = ("ix_agent_runs_waiting", "ix_agent_runs_waiting_since", "ix_agent_runs_created_at_id")
    plan = plans(repo, monkeypatch, search, without=(*others, "ix_agent_runs_waiting_created"))
    assert len(found) == 1  # the one run whose metadata holds it, ignoring case
    assert "ix_agent_runs_waiting_search" in plan and "Seq Scan" not in plan, plan


def test_the_outbox_counts_and_claim_read_their_indexes(
    repo: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = plans(repo, monkeypatch, repo.outbox.counts)
    assert "ix_outbox_given_up" in counted and "Seq Scan" not in counted, counted
    claimed = plans(repo, monkeypatch, lambda: repo.outbox.claim(10, timedelta(seconds=30)))
    assert "ix_outbox_due" in claimed and "Seq Scan on outbox" not in claimed, claimed
