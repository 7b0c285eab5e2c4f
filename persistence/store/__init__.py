"""The run store: one room per job, behind the thin ``RunStore`` front.

- ``runs``: create a run, read one back (``Runs``);
- ``transitions``: every status change, one guarded UPDATE (``Transitions``);
- ``events``: the audit stream (``Events``);
- ``decisions``: one per suspended turn (``Decisions``);
- ``ledger``: the tool-call ledger (``Ledger``);
- ``queries``: reads across runs (``Queries``);
- ``tallies``: runs per status, kept by the database's triggers (``Tallies``);
- ``retention``: purge (``Retention``);
- ``outbox``: outbound notifications (``OutboxStore``);
- ``sessions``: the inbox's sign-ins (``SessionStore``);
- ``throttle``: failed sign-ins, per client and per name (``SignInThrottle``);
- ``beat``: when each of beat's jobs last ran (``BeatJobs``);
- ``grants``: standing grants, and the suspension they release (``Grants``);
- ``mcp``: MCP tools' pins and the fingerprints their suspended calls were reviewed under;
- ``gateway``: the MCP gateway's held calls (``GatewayCalls``).

The dialect is chosen once (``dialects.statements_for``); every part sees only the
``Statements`` protocol. ORM rows never leave the store: it hands out the values of
``airlock.persistence.domain``.
"""

from __future__ import annotations

from sqlalchemy import Engine

from airlock.persistence.crypto import StateCipher
from airlock.persistence.store.beat import BeatJobs
from airlock.persistence.store.common import (
    BadCursorError,
    Clock,
    Event,
    LeaseLostError,
    UnknownRunError,
    parse_run_id,
    utcnow,
)
from airlock.persistence.store.connections import Connections
from airlock.persistence.store.context import Context
from airlock.persistence.store.decisions import Decisions, Receipt
from airlock.persistence.store.dialects import statements_for
from airlock.persistence.store.events import Events
from airlock.persistence.store.gateway import GatewayCalls, GatewayFigures, HeldCall
from airlock.persistence.store.grants import Grants
from airlock.persistence.store.ledger import Ledger, Prior
from airlock.persistence.store.mcp import McpPins, Pin
from airlock.persistence.store.outbox import OutboxStore
from airlock.persistence.store.queries import Queries
from airlock.persistence.store.retention import Retention
from airlock.persistence.store.retry import RetryPolicy, is_transient
from airlock.persistence.store.runs import Runs
from airlock.persistence.store.sessions import SessionStore, StoredSession
from airlock.persistence.store.tallies import Tallies
from airlock.persistence.store.throttle import SignInThrottle, Slot
from airlock.persistence.store.transitions import Transitions

__all__ = [
    "BadCursorError",
    "Clock",
    "Event",
    "GatewayCalls",
    "GatewayFigures",
    "HeldCall",
    "LeaseLostError",
    "McpPins",
    "Pin",
    "Prior",
    "Receipt",
    "RetryPolicy",
    "RunStore",
    "Slot",
    "StoredSession",
    "UnknownRunError",
    "is_transient",
    "parse_run_id",
    "utcnow",
]


class RunStore:
    def __init__(
        self,
        engine: Engine,
        *,
        cipher: StateCipher | None = None,
        clock: Clock = utcnow,
        retry: RetryPolicy | None = None,
    ) -> None:
        conns = Connections(engine)
        cipher = cipher or StateCipher()
        ctx = Context(
            conns, statements_for(conns, cipher, clock), cipher, clock, retry or RetryPolicy()
        )
        self.engine = engine
        self.now: Clock = clock
        self.connections = conns
        self.runs = Runs(ctx)
        self.transitions = Transitions(ctx)
        self.events = Events(ctx, self.runs)
        self.decisions = Decisions(ctx)
        self.ledger = Ledger(ctx, self.events)
        self.tallies = Tallies(ctx)
        self.queries = Queries(ctx, self.runs, self.tallies)
        self.retention = Retention(ctx)
        self.outbox = OutboxStore(ctx)
        self.sessions = SessionStore(ctx)
        self.throttle = SignInThrottle(ctx)
        self.beat = BeatJobs(ctx)
        self.grants = Grants(ctx, self.transitions)
        self.mcp = McpPins(ctx)
        self.gateway = GatewayCalls(ctx)

    def hold_connections(self) -> None:
        """The calling thread keeps its connections between statements (a worker's
        segment thread; see ``Connections.hold``)."""
        self.connections.hold()
