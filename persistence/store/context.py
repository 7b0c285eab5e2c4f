"""What each part of the store is built with."""

from __future__ import annotations

from dataclasses import dataclass

from airlock.persistence.crypto import StateCipher
from airlock.persistence.store.common import Clock
from airlock.persistence.store.connections import Connections
from airlock.persistence.store.dialects import Statements


@dataclass(frozen=True)
class Context:
    conns: Connections
    sql: Statements
    """The dialect's statements, chosen once."""
    cipher: StateCipher
    now: Clock
