"""Runs per status, kept by the database (``run_tallies``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, SmallInteger
from sqlalchemy.orm import Mapped, mapped_column

from airlock.persistence.models import Base


class RunTallyRow(Base):
    """Runs per status (a column each), kept by triggers on ``agent_runs`` in the
    transaction of every write (migration 0011, which says how): what ``stats`` and the
    queue's mark read. One row per slot (16 on PostgreSQL, one on SQLite); a status's
    count is the sum of its column. ``waiting_changes`` counts the writes into, out of or
    of a waiting run; ``waiting_changed_at`` is the latest one's ``updated_at``."""

    __tablename__ = "run_tallies"

    slot: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    queued: Mapped[int] = mapped_column(BigInteger)
    running: Mapped[int] = mapped_column(BigInteger)
    waiting_for_approval: Mapped[int] = mapped_column(BigInteger)
    completed: Mapped[int] = mapped_column(BigInteger)
    failed: Mapped[int] = mapped_column(BigInteger)
    cancelled: Mapped[int] = mapped_column(BigInteger)
    waiting_changes: Mapped[int] = mapped_column(BigInteger)
    waiting_changed_at: Mapped[datetime | None]
