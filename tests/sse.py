"""Reading server-sent events in tests, as an EventSource does: frames separated by a
blank line, ``id:``, ``event:`` and ``data:`` fields, comments skipped."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Frame:
    event: str
    """``message`` unless the frame names another."""
    id: str | None
    data: Any
    """The data, parsed as JSON."""


def frames(lines: Iterable[str]) -> Iterator[Frame]:
    """The frames of a stream's lines (as ``httpx.Response.iter_lines`` gives them),
    as they come; a frame without data (``retry:`` alone, a comment) is skipped."""
    fields: dict[str, str] = {}
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield Frame(
                    fields.get("event", "message"), fields.get("id"), json.loads("\n".join(data))
                )
            fields, data = {}, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        else:
            fields[name] = value


def parse(text: str) -> list[Frame]:
    """Every frame of a whole stream's text."""
    return list(frames(text.splitlines()))
