"""What each part of the store is built with."""

from __future__ import annotations

from dataclasses import dataclass

from persistence.crypto import StateCipher
from persistence.store.common import Clock
from persistence.store.connections import Connections
from persistence.store.dialects import Statements


@dataclass(frozen=True)
class Context:
    conns: Connections
    sql: Statements
    """The dialect's statements, chosen once."""
    cipher: StateCipher
    now: Clock
