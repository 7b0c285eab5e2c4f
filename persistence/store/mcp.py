"""MCP tools' pins (the definition reviewed, and its fingerprint) and the fingerprint
each suspended MCP call was reviewed under."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pydantic import JsonValue
from sqlalchemy import select

from airlock.persistence.store.common import parse_run_id
from airlock.persistence.store.context import Context
from airlock.persistence.store.sql import MCP_PINS, MCP_REVIEWS


@dataclass(frozen=True, slots=True)
class Pin:
    server: str
    tool: str
    fingerprint: str
    definition: dict[str, JsonValue]
    pinned_at: datetime


class McpPins:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def pins(self, server: str) -> dict[str, Pin]:
        with self._ctx.conns.one() as s:
            rows = s.execute(select(MCP_PINS).where(MCP_PINS.c.server == server)).all()
        return {
            r.tool: Pin(r.server, r.tool, r.fingerprint, dict(r.definition), r.pinned_at)
            for r in rows
        }

    def pin(self, server: str, tool: str) -> Pin | None:
        return self.pins_of(server, [tool]).get(tool)

    def pins_of(self, server: str, tools: list[str]) -> dict[str, Pin]:
        with self._ctx.conns.one() as s:
            rows = s.execute(
                select(MCP_PINS).where(MCP_PINS.c.server == server, MCP_PINS.c.tool.in_(tools))
            ).all()
        return {
            r.tool: Pin(r.server, r.tool, r.fingerprint, dict(r.definition), r.pinned_at)
            for r in rows
        }

    def record_first(
        self, server: str, tool: str, fingerprint: str, definition: dict[str, JsonValue]
    ) -> None:
        """Pin the tool unless it is pinned already (the first import wins)."""
        upsert = self._ctx.sql.upsert(MCP_PINS)
        row = {
            "server": server, "tool": tool, "fingerprint": fingerprint,
            "definition": definition, "pinned_at": self._ctx.now(),
        }  # fmt: skip
        with self._ctx.conns.one() as s:
            s.execute(upsert.values(row).on_conflict_do_nothing(index_elements=["server", "tool"]))

    def replace(
        self, server: str, tool: str, fingerprint: str, definition: dict[str, JsonValue]
    ) -> None:
        """Pin the tool's definition as it is now (``airlock mcp pin``)."""
        upsert = self._ctx.sql.upsert(MCP_PINS)
        now = self._ctx.now()
        row = {
            "server": server, "tool": tool, "fingerprint": fingerprint,
            "definition": definition, "pinned_at": now,
        }  # fmt: skip
        statement = upsert.values(row).on_conflict_do_update(
            index_elements=["server", "tool"],
            set_={"fingerprint": fingerprint, "definition": definition, "pinned_at": now},
        )
        with self._ctx.conns.one() as s:
            s.execute(statement)

    def review(self, run_id: str, reviews: dict[str, tuple[str, str]]) -> None:
        """Record the fingerprint each suspended call (``call_id``: (tool, fingerprint))
        is reviewed under; a call recorded already keeps its first."""
        if not reviews:
            return
        rid = parse_run_id(run_id)
        rows = [
            {"run_id": rid, "call_id": c, "tool": t, "fingerprint": f}
            for c, (t, f) in reviews.items()
        ]
        upsert = self._ctx.sql.upsert(MCP_REVIEWS)
        with self._ctx.conns.one() as s:
            s.execute(upsert.on_conflict_do_nothing(index_elements=["run_id", "call_id"]), rows)

    def reviewed(self, run_id: str, call_id: str) -> str | None:
        """The fingerprint the call was suspended under, if it was."""
        rid = parse_run_id(run_id)
        with self._ctx.conns.one() as s:
            found = s.execute(
                select(MCP_REVIEWS.c.fingerprint).where(
                    MCP_REVIEWS.c.run_id == rid, MCP_REVIEWS.c.call_id == call_id
                )
            ).scalar()
        return None if found is None else str(found)
