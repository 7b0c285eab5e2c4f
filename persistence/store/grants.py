"""Standing grants: recorded with the decision that gives them, found for a turn that
asks, and used in the transaction that suspends the turn, which locks each grant it
uses and re-checks it live (check and act in one step): a revocation that commits
first stops the release; one that comes later waits for it, and the release stands."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import JsonValue
from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.engine import Connection

from airlock.loop import SuspendedRunState
from airlock.persistence.domain import CallRecord, DecisionRecord, GrantRecord, Release
from airlock.persistence.store import sql
from airlock.persistence.store.common import Event, parse_run_id
from airlock.persistence.store.context import Context
from airlock.persistence.store.dialects import Writes
from airlock.persistence.store.guards import RUNNING, Guard, landed
from airlock.persistence.store.retry import retried, retrying
from airlock.persistence.store.transitions import Transitions

GRANTS, DECISIONS, RUNS = sql.GRANTS, sql.DECISIONS, sql.RUNS

Suspended = Literal["released", "waiting", "lost"]
"""``released``: grants decided the turn, the run is queued; ``waiting``: it waits for
a person; ``lost``: the lease was lost, nothing was written."""

Revoked = Literal["revoked", "not_found", "ended"]


class _LostError(Exception):
    """Internal: roll the suspension back, the lease was lost."""


class Grants:
    def __init__(self, ctx: Context, transitions: Transitions) -> None:
        self._ctx = ctx
        self._transitions = transitions

    def row(self, grant: GrantRecord, arguments_sha256: str | None) -> dict[str, Any]:
        """The ``grants`` row of ``grant`` (its arguments sealed)."""
        return {
            "id": uuid.UUID(grant.id),
            "agent": grant.agent,
            "tool": grant.tool,
            "scope": grant.scope,
            "run_id": parse_run_id(grant.run_id) if grant.run_id else None,
            "arguments_sha256": arguments_sha256,
            "arguments": (
                self._ctx.cipher.seal_json(grant.arguments) if grant.arguments is not None else None
            ),
            "granted_by": grant.granted_by,
            "auth": grant.auth,
            "reason": grant.reason,
            "source": grant.source,
            "created_at": grant.created_at,
            "expires_at": grant.expires_at,
            "revoked_at": None,
            "revoked_by": None,
            "uses": 0,
            "last_used_at": None,
        }

    @retried
    def matching(self, run_id: str, tools: Sequence[str], keys: Sequence[str]) -> list[GrantRecord]:
        """The grants live now that may cover a call of run ``run_id``: a ``run`` grant
        of that run for one of ``tools``, or a ``call`` grant whose key is in ``keys``
        (the caller checks the agent, the tool and who may decide). Oldest first."""
        rid = parse_run_id(run_id)
        if rid is None or not (tools or keys):
            return []
        now = self._ctx.now()
        query = (
            select(GRANTS)
            .where(
                or_(
                    GRANTS.c.arguments_sha256.in_(list(keys)),
                    (GRANTS.c.run_id == rid) & GRANTS.c.tool.in_(list(tools)),
                ),
                GRANTS.c.revoked_at.is_(None),
                GRANTS.c.expires_at > now,
            )
            .order_by(GRANTS.c.created_at, GRANTS.c.id)
        )
        with self._ctx.conns.one() as s:
            return [self._record(r) for r in s.execute(query).mappings()]

    def suspend(
        self,
        run_id: str,
        owner: str,
        state: SuspendedRunState,
        expires_at: datetime | None,
        *,
        release: Release,
        events: Sequence[Event] = (),
        calls: Sequence[CallRecord] = (),
        notify: str | None = None,
    ) -> Suspended:
        """The turn's suspension and, when every grant of ``release`` is still live as
        the transaction locks it, the grants' decision with it (the run goes on to
        ``queued``, no ``notify``: nobody is asked); else the suspension alone, with
        ``notify``. Guarded on the lease, as ``Transitions.suspend``."""
        values = self._transitions.suspension(state, expires_at)

        def unit(attempt: int) -> Suspended:
            if attempt:  # the first attempt may have committed before its answer was lost
                if landed(self._ctx, run_id, values):
                    return "waiting"
                if landed(self._ctx, run_id, values | {"status": "queued"}):
                    return "released"
            return self._suspend(
                run_id, owner, state, values, expires_at, release=release, writes=writes
            )

        writes = (events, calls, notify)
        return retrying(self._ctx.retry, unit, what="a suspension released by grants")

    def _suspend(
        self,
        run_id: str,
        owner: str,
        state: SuspendedRunState,
        values: dict[str, Any],
        expires_at: datetime | None,
        *,
        release: Release,
        writes: tuple[Sequence[Event], Sequence[CallRecord], str | None],
    ) -> Suspended:
        rid = parse_run_id(run_id)
        now = self._ctx.now()
        ids = [uuid.UUID(g) for g in release.grant_ids]
        events, calls, notify = writes
        try:
            with self._ctx.conns.tx() as s:
                # an approval that expires before it could be given (a policy's
                # expires_in of a few milliseconds) is for the expiry to settle
                live_turn = expires_at is None or expires_at > now
                held = live_turn and self._lock_live(s, ids, now)
                guard = Guard(RUNNING, owner=owner)
                moved = self._transitions.move(
                    s, run_id, guard, values, events=events, calls=calls,
                    notify=None if held else notify,
                )  # fmt: skip
                if not moved:
                    raise _LostError
                if not held:
                    return "waiting"
                self._decide(s, rid, state.turn_digest, release, now)
                s.execute(
                    update(GRANTS)
                    .where(GRANTS.c.id.in_(ids))
                    .values(uses=GRANTS.c.uses + 1, last_used_at=now)
                )
        except _LostError:
            return "lost"
        return "released"

    @staticmethod
    def _lock_live(s: Connection, ids: list[uuid.UUID], now: datetime) -> bool:
        """Lock the grants (``FOR UPDATE``; SQLite's writers queue on ``BEGIN IMMEDIATE``)
        and tell whether every one is live."""
        live = s.scalars(
            select(GRANTS.c.id)
            .where(GRANTS.c.id.in_(ids), GRANTS.c.revoked_at.is_(None), GRANTS.c.expires_at > now)
            .with_for_update()
        )
        return set(live) == set(ids)

    def _decide(
        self, s: Connection, rid: Any, digest: str, release: Release, now: datetime
    ) -> None:
        record = DecisionRecord(str(rid), digest, release.decision, release.approver, None, now)
        row = {
            "run_id": rid,
            "turn_digest": digest,
            "decision": self._ctx.cipher.seal_json(record.decision),
            "approver": record.approver,
            "webhook_id": None,
            "created_at": now,
            "identity": ("grant:" + ",".join(release.grant_ids))[:600],
        }
        params = {"rid": rid, "digest": digest, "now": now}
        decided = self._ctx.sql.decide(s, params, row, [("decision", release.event)], expiry=False)
        # the run was moved to wait on this turn by this transaction, its approval live
        assert decided, "a turn suspended in this transaction waits on it"

    def revoke(
        self, grant_id: str, by: str, *, event: Event | None = None
    ) -> tuple[Revoked, GrantRecord | None]:
        """Revoke a live grant: one guarded UPDATE (``revoked_at IS NULL`` and not
        expired), so of two revocations one wins and a release that holds the grant's
        lock is waited for. ``event`` is appended to the run the grant was given on
        (its ``source``; none when that run was purged) in the same transaction: a
        revocation is never made without its audit. ``ended``: already revoked or
        expired (the record says)."""
        gid = parse_run_id(grant_id)
        if gid is None:
            return "not_found", None
        now = self._ctx.now()
        statement = (
            update(GRANTS)
            .where(GRANTS.c.id == gid, GRANTS.c.revoked_at.is_(None), GRANTS.c.expires_at > now)
            .values(revoked_at=now, revoked_by=by)
            .returning(GRANTS.c.source)
        )
        with self._ctx.conns.tx() as s:
            source = s.execute(statement).scalar_one_or_none()
            if source is not None and event is not None:
                self._audit(s, source.get("run_id"), event)
        found = self.get(grant_id)
        if found is None:
            return "not_found", None
        return ("revoked" if source is not None else "ended"), found

    def _audit(self, s: Connection, run_id: object, event: Event) -> None:
        """``event`` appended to run ``run_id``'s stream (nothing when no run has it)."""
        rid = parse_run_id(run_id) if isinstance(run_id, str) else None
        if rid is None:
            return
        moving = update(RUNS).where(RUNS.c.id == bindparam("rid"))
        self._ctx.sql.with_events(
            s, ("grant_revoked",), lambda: moving, {"rid": rid}, Writes([event])
        )

    def get(self, grant_id: str) -> GrantRecord | None:
        gid = parse_run_id(grant_id)
        if gid is None:
            return None
        with self._ctx.conns.one() as s:
            row = s.execute(select(GRANTS).where(GRANTS.c.id == gid)).mappings().first()
        return self._record(row) if row is not None else None

    def given(self, run_id: str, turn_digest: str, granted_by: str) -> list[GrantRecord]:
        """The grants ``granted_by`` gave with a decision on this turn, oldest first."""
        query = (
            select(GRANTS)
            .where(GRANTS.c.granted_by == granted_by)
            .order_by(GRANTS.c.created_at.desc())
            .limit(500)
        )
        with self._ctx.conns.one() as s:
            found = [self._record(r) for r in s.execute(query).mappings()]
        source = {"run_id": run_id, "turn_digest": turn_digest}
        return [g for g in reversed(found) if {k: g.source.get(k) for k in source} == source]

    def list(
        self, *, active: bool = True, agent: str | None = None, limit: int = 100
    ) -> list[GrantRecord]:
        """Grants, newest first: only those live now when ``active``."""
        if agent is not None and "\x00" in agent:  # no agent's name (no PostgreSQL text)
            return []
        query = select(GRANTS).order_by(GRANTS.c.created_at.desc(), GRANTS.c.id).limit(limit)
        if active:
            now = self._ctx.now()
            query = query.where(GRANTS.c.revoked_at.is_(None), GRANTS.c.expires_at > now)
        if agent is not None:
            query = query.where(GRANTS.c.agent == agent)
        with self._ctx.conns.one() as s:
            return [self._record(r) for r in s.execute(query).mappings()]

    def _record(self, row: Mapping[Any, Any]) -> GrantRecord:
        arguments: dict[str, JsonValue] | None = None
        if row["arguments"] is not None:
            arguments = self._ctx.cipher.open_json(row["arguments"], "a grant's arguments")
        return GrantRecord(
            id=str(row["id"]),
            agent=row["agent"],
            tool=row["tool"],
            scope=row["scope"],
            run_id=str(row["run_id"]) if row["run_id"] is not None else None,
            arguments=arguments,
            granted_by=row["granted_by"],
            auth=row["auth"],
            reason=row["reason"],
            source=row["source"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            revoked_at=row["revoked_at"],
            revoked_by=row["revoked_by"],
            uses=row["uses"],
            last_used_at=row["last_used_at"],
        )
