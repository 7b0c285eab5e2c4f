"""What every part of the store shares: the clock, the errors, the id parser."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import JsonValue

from airlock.loop.errors import AirlockError

Clock = Callable[[], datetime]
Event = tuple[str, dict[str, JsonValue]]
"""An audit event (kind, payload) written in the same statement as a transition."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class UnknownRunError(AirlockError, LookupError):
    """No run has this id."""


class LeaseLostError(AirlockError):
    """The run is no longer leased to the segment that meant to write to it."""


class BadCursorError(AirlockError, ValueError):
    """The pagination cursor is malformed."""


def parse_run_id(run_id: str) -> uuid.UUID | None:
    """The one parser of run ids: ``None`` for anything that is not a UUID."""
    try:
        return uuid.UUID(str(run_id))
    except ValueError:
        return None
