"""What a transition requires of its run, as of its own statement (check and act in one
step): the ``WHERE`` of every guarded UPDATE."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, bindparam, select

from airlock.persistence.domain import RunStatus
from airlock.persistence.store import sql
from airlock.persistence.store.common import parse_run_id
from airlock.persistence.store.context import Context

RUNS = sql.RUNS


@dataclass(frozen=True)
class Guard:
    """What a transition requires of its run, besides its id, as of its statement."""

    expected: tuple[RunStatus, ...]
    owner: str | None = None
    """Leased to this owner."""
    turn_digest: str | None = None
    """Waiting on this turn."""
    expired: bool = False
    """Its approval expired."""
    lease_expired: bool = False
    """Its lease expired: a renewal that came first keeps the run."""
    unsuspended: bool = False
    """It never suspended (no turn of it waits or waited for a decision)."""

    def shape(self, columns: tuple[str, ...]) -> tuple[Any, ...]:
        statuses = tuple(s.value for s in self.expected)
        flags = (self.owner is not None, self.turn_digest is not None)
        return (
            "transition", statuses, columns, *flags, self.expired, self.lease_expired,
            self.unsuspended,
        )  # fmt: skip

    def conditions(self) -> list[ColumnElement[bool]]:
        conditions = [
            RUNS.c.id == bindparam("rid"),
            sql.status_in(*(s.value for s in self.expected)),
        ]
        if self.turn_digest is not None:
            conditions.append(RUNS.c.turn_digest == bindparam("digest"))
        if self.expired:
            conditions.append(RUNS.c.expires_at <= bindparam("now"))
        if self.lease_expired:
            conditions.append(RUNS.c.lease_expires_at < bindparam("now"))
        if self.unsuspended:
            conditions.append(RUNS.c.turn_digest.is_(None))
        if self.owner is not None:
            conditions.append(RUNS.c.lease_owner == bindparam("owner"))
        return conditions


RUNNING = (RunStatus.RUNNING,)


def landed(ctx: Context, run_id: str, values: Mapping[str, Any]) -> bool:
    """Whether the run's row shows the move that writes ``values``: its status, and the
    turn it stores (a suspension, a checkpoint). A transition repeated because its
    answer was lost asks it first: its guard would refuse the repeat, and its events
    are written already."""
    with ctx.conns.one() as s:
        row = s.execute(
            select(RUNS.c.status, RUNS.c.turn_digest).where(RUNS.c.id == parse_run_id(run_id))
        )
        found = row.first()
    if found is None:
        return False
    status, digest = found
    if "status" in values and status != values["status"]:
        return False
    return "turn_digest" not in values or digest == values["turn_digest"]
