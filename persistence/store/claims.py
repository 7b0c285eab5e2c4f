"""Claiming a run: queued → running with a lease, or continuing the claim of an earlier
owner (a task retried after the database went away mid-segment), as one unit the store
retries (``Transitions.claim``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, update

from airlock.persistence.domain import CallStatus
from airlock.persistence.store import sql
from airlock.persistence.store.context import Context

CALLS = sql.CALLS

ADOPT_CALLS = (
    update(CALLS)
    .where(
        CALLS.c.run_id == bindparam("rid"),
        CALLS.c.status == CallStatus.STARTED.value,
        CALLS.c.started_by == bindparam("previous"),
    )
    .values(started_by=bindparam("owner"))
)
"""The calls an earlier owner (``previous``) started and, as it stopped with no call it
ran unrecorded, never ran: marked as started by the owner that takes its claim over, in
the claim's transaction. The ledger then finds them this owner's to run
(``Ledger.start_call``), and, were this owner lost in turn, in doubt."""


@dataclass(frozen=True)
class ClaimAttempt:
    """One attempt at a claim (``retrying``'s unit): the run's row as the claim returns
    it, or None when it is not claimable."""

    ctx: Context
    rid: uuid.UUID
    owner: str
    lease: timedelta
    take_over: str | None
    adopt: bool
    """``take_over`` ran no call it did not record: its calls started are ours."""

    def __call__(self, attempt: int) -> Any:
        row = self.claim(self.take_over, adopt=self.adopt)
        if row is None and attempt:
            # the first attempt may have committed before its answer was lost: the run
            # is then leased to ``owner`` already (with what it adopted), and continuing
            # that claim is taking it over from itself. Tried second: a takeover claims
            # a queued run too, and ``take_over``'s would adopt what it must
            row = self.claim(self.owner, adopt=False)
        return row

    def claim(self, take_over: str | None, *, adopt: bool) -> Any:
        now = self.ctx.now()
        params = {"rid": self.rid, "owner": self.owner, "expires": now + self.lease, "now": now}
        claim = sql.CLAIM if take_over is None else sql.TAKE_OVER
        if take_over is not None:
            params["previous"] = take_over
        adopting = adopt and take_over is not None
        conns = self.ctx.conns
        with conns.tx() if adopting else conns.one(durable=False) as s:
            row = self.ctx.sql.hot(s, ("claim", take_over is None), lambda: claim, params)
            if row is not None and adopting:
                s.execute(ADOPT_CALLS, params)
            return row
