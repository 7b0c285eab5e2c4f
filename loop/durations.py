"""Durations: the one parser behind every duration Airlock reads (DESIGN §6): the CLI's
``--older-than`` and ``--for``, a grant's ``expires_in`` and the policy file's. A number
of ASCII digits (``"٣d"`` is no duration) and a unit: ``90s``, ``30m``, ``8h``, ``2d``
(``1.5h`` too); a whole number of seconds where the value is a number."""

from __future__ import annotations

import math
import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])", re.ASCII)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
SHAPE = 'a number of ASCII digits and a unit, like "90s", "30m", "8h" or "2d"'


def parse_seconds(value: object) -> float:
    """``value`` as seconds (0 or more): a whole number, or text of ASCII digits and a
    unit. ValueError naming the value when it is neither. ``inf`` for one too long for
    a float (``10**400``, or 400 digits and a unit): the caller's bound refuses it."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        try:
            return float(value)
        except OverflowError:  # an int too large for a float
            return math.inf
    found = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
    if found is None:
        raise ValueError(f"{value!r} is not a duration: {SHAPE}")
    return float(found[1]) * _UNITS[found[2]]


def duration_seconds(value: object) -> float | None:
    """A positive duration (``parse_seconds``) as seconds; None for anything else."""
    try:
        seconds = parse_seconds(value)
    except ValueError:
        return None
    return seconds if seconds > 0 else None
