"""The one backoff of Airlock's retries: a task that met an unavailable database, a
segment that met a transient error, a notification its receiver did not accept."""

from __future__ import annotations

import random


def backoff(attempt: int, *, base: float = 1.0, cap: float) -> float:
    """Seconds before try ``attempt + 1``: ``base`` doubled per attempt, at most ``cap``,
    jittered by ±50% so that many retries started together do not come back together."""
    return float(min(cap, base * 2**attempt) * random.uniform(0.5, 1.5))
