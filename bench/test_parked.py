"""``bench.parked`` at a tiny size, so that it cannot rot: it seeds, resumes, reads and
reports every figure at each size. No timing is asserted."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from bench import parked
from bench.common import PG


@pytest.fixture
def postgres() -> None:
    engine = create_engine(PG)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        pytest.skip(f"PostgreSQL at {PG} is not reachable: {exc}")
    finally:
        engine.dispose()


@pytest.mark.usefixtures("postgres")
def test_the_parked_benchmark_runs_at_a_tiny_size() -> None:
    results = parked.main(["--sizes", "0,30", "--resumes", "2", "--no-record"])
    assert [r["waiting"] for r in results] == [0, 30]
    for figures in results:
        assert set(parked.TARGETS) <= set(figures) and figures["targets_met"].keys() == set(
            parked.TARGETS
        )
        assert figures["agent_runs_table_bytes"] > 0
    assert results[1]["index_ix_agent_runs_waiting_search_bytes"] > 0
