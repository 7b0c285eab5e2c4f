"""Reads across runs: the keyset-paginated list, what the sweeper and the expiry look
for, and the figures of ``stats``."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, Text, and_, cast, func, or_, select

from airlock.persistence.domain import TERMINAL, Page, Run, RunStatus, WaitingMark
from airlock.persistence.store import sql
from airlock.persistence.store.common import BadCursorError
from airlock.persistence.store.context import Context
from airlock.persistence.store.runs import Runs
from airlock.persistence.store.tallies import Tallies

RUNS = sql.RUNS


class Queries:
    def __init__(self, ctx: Context, runs: Runs, tallies: Tallies) -> None:
        self._ctx = ctx
        self._runs = runs
        self._tallies = tallies

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        oldest_first: bool = False,
        statuses: Sequence[RunStatus] = (),
        metadata_contains: str | None = None,
    ) -> Page:
        """Newest first (or oldest first), keyset-paginated on (created_at, id).
        ``statuses``: any of these; ``metadata_contains``: text found in the metadata's
        JSON, ignoring case."""
        if agent is not None and "\x00" in agent:  # no agent's name (no PostgreSQL text)
            return Page((), None)
        conditions: list[ColumnElement[bool]] = []
        if status is not None:
            conditions.append(RUNS.c.status == status.value)
        if statuses:
            conditions.append(RUNS.c.status.in_([s.value for s in statuses]))
        if agent is not None:
            conditions.append(RUNS.c.agent == agent)
        if cursor is not None:
            conditions.append(_after(*decode_cursor(cursor), oldest_first=oldest_first))
        order = _order(RUNS.c.created_at, RUNS.c.id, oldest_first=oldest_first)
        query = sql.run_select().where(*conditions).order_by(*order).limit(limit + 1)
        with self._ctx.conns.one() as s:
            if metadata_contains:
                found = self._found_early(s, conditions, metadata_contains, limit, oldest_first)
                query = query.where(
                    RUNS.c.id.in_(found) if found else _metadata_holds(metadata_contains)
                )
            rows = s.execute(query).all()
            runs = tuple(self._runs.opened(r._mapping) for r in rows[:limit])
        next_cursor = encode_cursor(runs[-1]) if len(rows) > limit else None
        return Page(runs, next_cursor)

    def _found_early(
        self,
        s: Connection,
        conditions: Sequence[ColumnElement[bool]],
        needle: str,
        limit: int,
        oldest_first: bool,
    ) -> list[uuid.UUID]:
        """The ids of a search's page (``limit + 1`` runs), when the first ``SEARCHED_FIRST``
        runs of the listing (in its order, through its index) hold that many: text many
        runs hold is found there. Else none, and the page is searched for among all (on
        PostgreSQL through the trigram index of the waiting runs' metadata, where text
        few runs hold is found at once)."""
        head = (
            select(RUNS.c.id, RUNS.c.created_at, RUNS.c["metadata"])
            .where(*conditions)
            .order_by(*_order(RUNS.c.created_at, RUNS.c.id, oldest_first=oldest_first))
            .limit(SEARCHED_FIRST)
            .subquery()
        )
        found = (
            select(head.c.id)
            .where(_metadata_holds(needle, head.c["metadata"]))
            .order_by(*_order(head.c.created_at, head.c.id, oldest_first=oldest_first))
            .limit(limit + 1)
        )
        ids = list(s.scalars(found).all())
        return ids if len(ids) > limit else []

    def _ids(self, query: Select[tuple[uuid.UUID]]) -> list[str]:
        with self._ctx.conns.one() as s:
            return [str(i) for i in s.scalars(query).all()]

    def stale_queued(self, older_than: timedelta, limit: int = 500) -> list[str]:
        """Runs that sat queued longer than ``older_than``: their wake-up was probably lost."""
        cutoff = self._ctx.now() - older_than
        return self._ids(
            select(RUNS.c.id)
            .where(RUNS.c.status == RunStatus.QUEUED.value, RUNS.c.updated_at < cutoff)
            .order_by(RUNS.c.updated_at)
            .limit(limit)
        )

    def expired_approvals(self, limit: int = 500) -> list[str]:
        """Runs that wait on an approval whose time ran out, the longest expired first."""
        return self._ids(
            select(RUNS.c.id)
            .where(
                RUNS.c.status == RunStatus.WAITING_FOR_APPROVAL.value,
                RUNS.c.expires_at.is_not(None),
                RUNS.c.expires_at < self._ctx.now(),
            )
            .order_by(RUNS.c.expires_at)
            .limit(limit)
        )

    def finished_since(self, since: datetime) -> dict[RunStatus, int]:
        """Runs that reached a terminal status after ``since``, by status."""
        with self._ctx.conns.one() as s:
            rows = s.execute(
                select(RUNS.c.status, func.count())
                .where(RUNS.c.status.in_([t.value for t in TERMINAL]), RUNS.c.updated_at >= since)
                .group_by(RUNS.c.status)
            ).all()
        return {RunStatus(status): int(n) for status, n in rows}

    def expired_lease_count(self) -> int:
        with self._ctx.conns.one() as s:
            count = s.scalar(
                select(func.count()).where(
                    RUNS.c.status == RunStatus.RUNNING.value,
                    RUNS.c.lease_expires_at < self._ctx.now(),
                )
            )
        return int(count or 0)

    def oldest_waiting(self) -> datetime | None:
        """The earliest ``suspended_at`` of a waiting run (``ix_agent_runs_waiting_since``)."""
        with self._ctx.conns.one() as s:
            value: datetime | None = s.scalar(
                select(func.min(RUNS.c.suspended_at)).where(
                    RUNS.c.status == RunStatus.WAITING_FOR_APPROVAL.value
                )
            )
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def waiting_mark(self) -> WaitingMark:
        """The waiting queue's mark (``WaitingMark``), read from the tallies."""
        return self._tallies.waiting_mark()

    def count_by_status(self) -> dict[RunStatus, int]:
        """Runs per status, read from the tallies (a few rows, whatever the runs)."""
        return self._tallies.by_status()


SEARCHED_FIRST = 2000
"""A search looks among this many runs of its listing first (see ``_found_early``)."""


def _after(created: datetime, rid: uuid.UUID, *, oldest_first: bool) -> ColumnElement[bool]:
    """Past a cursor at (``created``, ``rid``) in the listing's order."""
    if oldest_first:
        return or_(RUNS.c.created_at > created, and_(RUNS.c.created_at == created, RUNS.c.id > rid))
    return or_(RUNS.c.created_at < created, and_(RUNS.c.created_at == created, RUNS.c.id < rid))


def _order(
    created: ColumnElement[Any], rid: ColumnElement[Any], *, oldest_first: bool
) -> tuple[ColumnElement[Any], ...]:
    return (created, rid) if oldest_first else (created.desc(), rid.desc())


def _metadata_holds(
    needle: str, column: ColumnElement[object] | None = None
) -> ColumnElement[bool]:
    """The metadata's JSON text holds ``needle``, ignoring case; non-ASCII text is
    stored as ``\\u`` escapes, so it is looked for in that form too (and only in that
    form with a NUL, which no PostgreSQL text holds, so cannot be a parameter there)."""
    text = func.lower(cast(RUNS.c["metadata"] if column is None else column, Text))
    plain = needle.lower()
    escaped = json.dumps(plain)[1:-1]
    forms = {plain, escaped} if "\x00" not in plain else {escaped}
    return or_(*(text.contains(form, autoescape=True) for form in sorted(forms)))


def encode_cursor(run: Run) -> str:
    raw = f"{run.created_at.isoformat()}|{run.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, rid = raw.split("|")
        at = datetime.fromisoformat(created)
        if at.tzinfo is None:
            raise ValueError("the cursor's time has no timezone")
        return at, uuid.UUID(rid)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadCursorError(f"cursor {cursor!r} is not one this API returned") from exc
