"""A search of the runs' metadata (the inbox's ``?q=``) is looked for among the first
runs of its listing, then among all: the same pages either way, on both databases."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from airlock.persistence.store import RunStore, queries
from tests.conftest import FakeClock


@pytest.fixture
def repo(engine: Engine, clock: FakeClock) -> RunStore:
    return RunStore(engine, clock=clock)


@pytest.mark.parametrize("oldest_first", [True, False])
def test_a_search_finds_the_same_runs_early_or_among_all(
    repo: RunStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, oldest_first: bool
) -> None:
    """A search looks among the first runs of its listing first (``SEARCHED_FIRST``, 3
    here), then among all: either way its pages are those of the runs that hold the
    text, in the listing's order."""
    monkeypatch.setattr(queries, "SEARCHED_FIRST", 3)
    tags = ["many", "many", "Many", "few", "many", "many", "many", "few", "many"]
    made = []
    for tag in tags:
        clock.advance(seconds=1)
        made.append(repo.runs.create("mailer", "x", metadata={"tag": tag})[0].id)
    order = made if oldest_first else made[::-1]
    for needle in ("MANY", "few", "absent"):
        expected = [i for i in order if needle.lower() in tags[made.index(i)].lower()]
        seen: list[str] = []
        cursor = None
        while True:
            page = repo.queries.list_runs(
                limit=2, cursor=cursor, oldest_first=oldest_first, metadata_contains=needle
            )
            seen += [r.id for r in page.runs]
            if (cursor := page.next_cursor) is None:
                break
        assert seen == expected, needle
