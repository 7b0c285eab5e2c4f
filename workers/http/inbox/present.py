"""How the inbox's pages say things: spans of time, a transcript's messages, a
timeline's events, and a refusal in plain words."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airlock.workers.service.views import clip


def explained(exc: Exception) -> str:
    """A refusal as the page says it: a decided or moved-on turn in plain words."""
    text = str(exc)
    stale = ("another decision", "not the digest", "not waiting")
    return STALE if any(s in text for s in stale) else text


STALE = "this turn was already decided (or the run moved on): reload to see where it is now"
NOTICES = {
    "recorded": "Decision recorded: the run resumes.",
    "partial": "Your approval is recorded; the call needs more approvals.",
    "duplicate": "This decision was already recorded; nothing changed.",
    "withdrawn": "Your approval is withdrawn; the call waits for approvals.",
}


def ago(now: datetime, then: datetime | None) -> str | None:
    return span((now - then).total_seconds()) if then is not None else None


def until(now: datetime, then: datetime | None) -> str | None:
    if then is None:
        return None
    left = (then - now).total_seconds()
    return "expired" if left <= 0 else span(left)


def span(seconds: float) -> str:
    s = int(seconds)
    if s >= 86400:
        return f"{s // 86400}d {s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60}m"
    if s >= 60:
        return f"{s // 60}m {s % 60}s"
    return f"{s}s"


def message(message: Any) -> dict[str, Any]:
    return {
        "role": message.role,
        "content": getattr(message, "content", None),
        "calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments}
            for c in getattr(message, "tool_calls", ())
        ],
        "name": getattr(message, "name", None),
        "is_error": getattr(message, "is_error", False),
    }


def line(values: Mapping[str, Any], most: int = 4, width: int = 40) -> str:
    """A mapping in a line, ``key=value`` each, long values cut at a word with "…"."""
    shown = [
        f"{k}={clip(v if isinstance(v, str) else json.dumps(v), width)}" for k, v in values.items()
    ]
    extra = len(values) - most
    return ", ".join(shown[:most]) + (f", and {extra} more" if extra > 0 else "")
