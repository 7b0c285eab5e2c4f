"""What judging one call may cost, bounded by construction: a ``regex`` condition runs on
a linear-time engine the caller supplies (the workers give RE2; the loop imports no
engine and has no fallback to Python's backtracking ``re``), its compiled program is
bounded when the file is read, and so is the text it reads when a call is judged. Globs
(``agent``, ``tool``) are bounded in length: Python's ``fnmatch`` (3.11) commits to each
``*`` it passes (atomic groups), so a match costs at most the glob's length times the
name's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

MAX_MATCHED_BYTES = 64 * 1024
"""The longest text (its UTF-8 bytes) a ``regex`` condition reads: a longer value cannot
be judged, and the call is ``ask``."""
MAX_REGEX_SIZE = 10_000
"""The most instructions a pattern's programs may hold together (forward and reverse:
RE2 runs both to find a match). ``^\\pL+ \\pL+$`` holds 5,184 (a Unicode class is
compiled to its UTF-8 byte ranges), ``.{1000}`` 16,008."""
MAX_PATTERN_LENGTH = 1000
"""The longest pattern, in characters, a ``regex`` condition may hold."""
MAX_GLOB_LENGTH = 256
"""The longest ``agent`` or ``tool`` glob."""
STEP_BUDGET = MAX_REGEX_SIZE * (MAX_MATCHED_BYTES + 1)
"""The most steps one ``regex`` condition takes: a linear-time engine visits each of its
instructions at most once per byte of the text (and once at its end)."""


class Regex(Protocol):
    """A pattern compiled by a linear-time engine."""

    @property
    def size(self) -> int:
        """Its instructions: a search visits each at most once per byte of text."""
        ...

    def search(self, text: bytes) -> bool:
        """Whether the pattern matches somewhere in ``text`` (UTF-8)."""
        ...


CompileRegex = Callable[[str], Regex]
"""Compiles a pattern on a linear-time engine; raises ``ValueError`` saying why a pattern
is refused (a construct the engine does not support: backreferences, lookaround)."""


def compile_pattern(source: str, compile_regex: CompileRegex | None) -> Regex:
    """The pattern compiled, within the bounds. Raises ``ValueError`` saying why not."""
    if compile_regex is None:
        raise ValueError(
            "a regex condition needs a linear-time engine (RE2, the google-re2 package), "
            "and none is available here"
        )
    if len(source) > MAX_PATTERN_LENGTH:
        raise ValueError(
            f"the pattern is {len(source)} characters long, more than {MAX_PATTERN_LENGTH}"
        )
    compiled = compile_regex(source)
    if compiled.size > MAX_REGEX_SIZE:
        raise ValueError(
            f"the pattern compiles to {compiled.size} instructions, more than the "
            f"{MAX_REGEX_SIZE} a condition may take (narrow its counted repetitions and "
            "character classes)"
        )
    return compiled


def matched_text(value: str) -> bytes:
    """The text a ``regex`` condition reads: the value as UTF-8, at most
    ``MAX_MATCHED_BYTES`` long. Raises ``ValueError`` saying why it cannot be judged."""
    if len(value) > MAX_MATCHED_BYTES:  # no shorter once encoded: not worth encoding
        raise ValueError(f"is {len(value)} characters long, {_beyond()}")
    try:
        text = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("is not valid Unicode text (it holds a lone surrogate)") from exc
    if len(text) > MAX_MATCHED_BYTES:
        raise ValueError(f"is {len(text)} bytes long in UTF-8, {_beyond()}")
    return text


def _beyond() -> str:
    return f"more than the {MAX_MATCHED_BYTES} bytes a regex condition reads"
