"""What a finished run (or segment) hands back."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from airlock.loop.messages import Message, Usage

Outcome = Literal["succeeded", "failed"]


class Termination(StrEnum):
    COMPLETED = "completed"
    MAX_ITERATIONS = "max_iterations"
    BUDGET_EXHAUSTED = "budget_exhausted"


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One tool invocation, lean: what ran, how it ended, how long it took."""

    call_id: str
    name: str
    outcome: Outcome
    duration_ms: float


@dataclass(frozen=True, slots=True)
class LoopResult:
    run_id: str
    output: str | None
    termination: Termination
    iterations: int
    usage: Usage
    trace: tuple[TraceEntry, ...]
    transcript: tuple[Message, ...]
