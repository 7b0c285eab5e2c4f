"""What each part of the store is built with."""

from __future__ import annotations

from dataclasses import dataclass, field

from airlock.persistence.crypto import StateCipher
from airlock.persistence.store.common import Clock
from airlock.persistence.store.connections import Connections
from airlock.persistence.store.dialects import Statements
from airlock.persistence.store.retry import RetryPolicy


@dataclass(frozen=True)
class Context:
    conns: Connections
    sql: Statements
    """The dialect's statements, chosen once."""
    cipher: StateCipher
    now: Clock
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How long a unit is retried while the database connection is lost."""
