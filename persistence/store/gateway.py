"""The MCP gateway's held calls (``mcp_gateway_calls``): which run holds a principal's
call of a tool with given arguments, open until its result was returned once.

Each step is one statement that decides on the state it writes: ``open`` inserts the
call's open key or, when one is open already, finds it (the unique key decides between
two concurrent identical calls: one row, so one run); ``close`` clears the open key only
while it is set (the result is marked returned once)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, or_, select, update

from airlock.persistence.domain import ACTIVE
from airlock.persistence.store.common import parse_run_id
from airlock.persistence.store.context import Context
from airlock.persistence.store.retry import retried
from airlock.persistence.store.sql import MCP_GATEWAY_CALLS, RUNS

ATTEMPTS = 5
"""Tries of ``open`` when the call it found open was closed before it could be read."""


@dataclass(frozen=True, slots=True)
class HeldCall:
    id: str
    run_id: str | None
    server: str
    tool: str
    principal: str
    created: bool
    """Whether this ``open`` made it (else it attached to one open already)."""
    opened_at: datetime | None = None
    """When the call was first asked (``find`` and ``open`` say it)."""


@dataclass(frozen=True, slots=True)
class GatewayFigures:
    held: list[tuple[str, str, int]]
    """(server, tool, calls) held open now."""
    returned: list[tuple[str, str, int]]
    """(server, tool, calls) whose result was returned."""
    waits: list[float]
    """Seconds from each recent returned call's first ask to its result, ascending."""


class GatewayCalls:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    @retried  # a repeat finds the row its first attempt inserted
    def open(self, digest: str, principal: str, server: str, tool: str) -> HeldCall:
        """The open call of ``digest``: a new one, or the one open already."""
        for _ in range(ATTEMPTS):
            new = uuid.uuid4()
            row = {
                "id": new, "open_key": digest, "digest": digest, "principal": principal,
                "server": server, "tool": tool, "created_at": self._ctx.now(),
            }  # fmt: skip
            insert = self._ctx.sql.upsert(MCP_GATEWAY_CALLS).values(row)
            with self._ctx.conns.one() as s:
                s.execute(insert.on_conflict_do_nothing(index_elements=["open_key"]))
                found = s.execute(
                    select(MCP_GATEWAY_CALLS).where(MCP_GATEWAY_CALLS.c.open_key == digest)
                ).first()
            if found is not None:
                return HeldCall(
                    str(found.id),
                    None if found.run_id is None else str(found.run_id),
                    found.server,
                    found.tool,
                    found.principal,
                    found.id == new,
                    found.created_at,
                )
        raise RuntimeError(f"the held call {digest} kept closing while it was opened")

    @retried  # a read
    def find(self, call_id: str) -> HeldCall | None:
        """The held call of this id (open or returned); None when there is none (an id
        that is no UUID in its canonical spelling included)."""
        try:
            key = uuid.UUID(call_id)
        except ValueError:
            return None
        if str(key) != call_id:  # only the id as it was given (no other spelling of it)
            return None
        with self._ctx.conns.one() as s:
            query = select(MCP_GATEWAY_CALLS).where(MCP_GATEWAY_CALLS.c.id == key)
            found = s.execute(query).first()
        if found is None:
            return None
        run_id = None if found.run_id is None else str(found.run_id)
        return HeldCall(
            str(found.id), run_id, found.server, found.tool, found.principal,
            created=False, opened_at=found.created_at,
        )  # fmt: skip

    @retried  # guarded on no run noted yet: a repeat changes nothing
    def bind(self, call_id: str, run_id: str) -> None:
        """Note the run that holds the call (the first run noted stays)."""
        statement = (
            update(MCP_GATEWAY_CALLS)
            .where(MCP_GATEWAY_CALLS.c.id == uuid.UUID(call_id))
            .where(MCP_GATEWAY_CALLS.c.run_id.is_(None))
            .values(run_id=parse_run_id(run_id))
        )
        with self._ctx.conns.one() as s:
            s.execute(statement)

    @retried  # guarded on the key still set: a repeat changes nothing
    def close(self, call_id: str) -> bool:
        """Mark the call's result returned (an identical call is a new call from now
        on); False when it was marked already."""
        statement = (
            update(MCP_GATEWAY_CALLS)
            .where(MCP_GATEWAY_CALLS.c.id == uuid.UUID(call_id))
            .where(MCP_GATEWAY_CALLS.c.open_key.is_not(None))
            .values(open_key=None, returned_at=self._ctx.now())
        )
        with self._ctx.conns.one() as s:
            closed = s.execute(statement).rowcount
        return bool(closed)

    @retried  # reads
    def figures(self, recent: int = 1000) -> GatewayFigures:
        """What ``airlock stats`` shows: the calls held now (their run not over: waiting
        for a decision, or making the approved call) and those whose result was returned,
        by server and tool; how long the recent returned ones took."""
        table = MCP_GATEWAY_CALLS
        not_over = or_(RUNS.c.status.is_(None), RUNS.c.status.in_([s.value for s in ACTIVE]))
        held = (
            select(table.c.server, table.c.tool, func.count())
            .select_from(table.outerjoin(RUNS, RUNS.c.id == table.c.run_id))
            .where(table.c.open_key.is_not(None), not_over)
            .group_by(table.c.server, table.c.tool)
            .order_by(table.c.server, table.c.tool)
        )
        returned = (
            select(table.c.server, table.c.tool, func.count())
            .where(table.c.returned_at.is_not(None))
            .group_by(table.c.server, table.c.tool)
            .order_by(table.c.server, table.c.tool)
        )
        spans = (
            select(table.c.created_at, table.c.returned_at)
            .where(table.c.returned_at.is_not(None))
            .order_by(table.c.returned_at.desc())
            .limit(recent)
        )
        with self._ctx.conns.one() as s:
            holding = s.execute(held).all()
            gave = s.execute(returned).all()
            waited = [(r[1] - r[0]).total_seconds() for r in s.execute(spans).all()]
        return GatewayFigures(
            held=[(r[0], r[1], int(r[2])) for r in holding],
            returned=[(r[0], r[1], int(r[2])) for r in gave],
            waits=sorted(waited),
        )
