"""The loop's event sink for a run: every event goes to ``run_events`` as it happens,
and the run row's counters are kept current after every model call."""

from __future__ import annotations

from loop import LoopEvent, Usage, event_payload
from loop.events import DecisionApplied, Finished, ModelCalled, RunStarted, Suspended
from persistence.repository import Event, RunRepository


class RunEventSink:
    def __init__(self, repo: RunRepository, run_id: str, usage: Usage) -> None:
        self._repo = repo
        self._run_id = run_id
        self._usage = usage
        self.held: list[Event] = []
        """The segment's last event (completed, suspended): it is written by the run's
        transition, in the same statement, and not at all if the transition fails."""

    def emit(self, event: LoopEvent) -> None:
        counters: tuple[int, Usage] | None = None
        match event:
            case RunStarted():
                return  # the request event was written when the run was created
            case DecisionApplied(source="operator"):
                return  # written, with who decided, when the decision was recorded
            case ModelCalled(iteration=iteration, usage=usage):
                self._usage = self._usage + usage
                counters = (iteration, self._usage)  # kept current on the run row
        payload = event_payload(event)
        kind = str(payload.pop("kind"))
        payload.pop("run_id", None)
        if isinstance(event, Finished | Suspended):
            self.held.append((kind, payload))
            return
        self._repo.append_event(self._run_id, kind, payload, counters=counters)
