"""Line numbers for a TOML policy file: ``tomllib`` gives them only for syntax errors,
so the rules' headers (``[[rules]]``, ``[[agents.NAME.rules]]``) are found by scanning."""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*\"?([A-Za-z0-9_\-]+)\"?\s*=")


class Locator:
    def __init__(self, text: str) -> None:
        self._lines = text.splitlines()
        self._headers: list[tuple[int, str]] = []
        for number, line in enumerate(self._lines, start=1):
            found = _HEADER.match(line)
            if found:
                name = re.sub(r"\s*\.\s*", ".", found.group(1)).replace('"', "")
                self._headers.append((number, name))

    def table(self, name: str, index: int) -> int:
        """The line of the ``index``-th ``[[name]]`` header (0 when not written as one)."""
        lines = [number for number, header in self._headers if header == name]
        return lines[index] if index < len(lines) else 0

    def key(self, start: int, key: str) -> int:
        """The line of ``key = …`` in the table that begins at ``start`` (or ``start``)."""
        if start <= 0:
            return self.top_key(key)
        for number in range(start + 1, len(self._lines) + 1):
            line = self._lines[number - 1]
            if _HEADER.match(line):
                break
            found = _KEY.match(line)
            if found and found.group(1) == key:
                return number
        return start

    def top_key(self, key: str) -> int:
        for number, line in enumerate(self._lines, start=1):
            if _HEADER.match(line):
                break
            found = _KEY.match(line)
            if found and found.group(1) == key:
                return number
        return 0
