"""The engine a policy's ``regex`` conditions run on: RE2 (the ``google-re2`` package),
which matches in time linear in the text, whatever the pattern (Python's ``re``
backtracks: ``^([a-zA-Z0-9._-]+)*@corp\\.com$`` against 43 characters of a model's
choosing kept one C call, and under gevent the whole worker, busy for over 40 s).
``airlock.loop.policy`` takes :func:`compile_re2` as its ``compile_regex``; there is no
fallback: without RE2 a file with a regex condition is refused."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airlock.loop.policy import Regex

RE2_MAX_MEM = 8 << 20
"""The memory RE2 may use per pattern, to compile it and cache its automaton (RE2's
default): a pattern that needs more is refused."""

_HINTS = (
    (re.compile(r"invalid perl operator: \(\?<?[=!]"), "lookaround is not supported"),
    (re.compile(r"invalid perl operator: \(\?>"), "atomic groups are not supported"),
    (re.compile(r"invalid escape sequence: \\[1-9]"), "backreferences are not supported"),
    (re.compile(r"invalid escape sequence: \\Z"), r"write \z for the end of the text"),
    (re.compile(r"bad repetition operator: .\+"), "possessive repetitions are not supported"),
    (re.compile(r"pattern too large"), "the pattern is too large"),
)


@dataclass(frozen=True, slots=True)
class Re2Regex:
    """A pattern RE2 compiled (never capturing: a condition only asks whether it matches)."""

    compiled: Any
    size: int
    """Its forward and reverse programs' instructions (RE2 runs both to find a match)."""

    def search(self, text: bytes) -> bool:
        return self.compiled.search(text) is not None


def compile_re2(pattern: str) -> Regex:
    """``pattern`` compiled by RE2. Raises ``ValueError`` saying why it is refused: a
    construct RE2 does not support, or RE2 missing here."""
    try:
        import re2  # type: ignore[import-untyped]  # noqa: PLC0415 - only for a regex
    except ImportError as exc:
        raise ValueError(
            f"RE2 (the google-re2 package), the only engine regex conditions run on, "
            f"cannot be imported here: {exc}"
        ) from exc
    options = re2.Options()
    options.never_capture = True
    options.log_errors = False
    options.max_mem = RE2_MAX_MEM
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as exc:
        raise ValueError(_refusal(exc)) from exc
    return Re2Regex(compiled, compiled.programsize + compiled.reverseprogramsize)


def _refusal(exc: Exception) -> str:
    said = exc.args[0] if exc.args else ""
    message = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
    hint = next((h for found, h in _HINTS if found.search(message)), None)
    if hint is None:
        return f"RE2 refuses it: {message}"
    return f"{hint} (RE2, which matches in linear time, refuses it: {message})"
