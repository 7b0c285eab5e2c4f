"""What a decision will do, before it is sent: which calls run (with their final
arguments) and which are denied (with what the model is told). Worked out by the same
code that applies a recorded decision (``to_loop_decisions`` then the loop's
``resolve``), so the page cannot say one thing and the run do another."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import JsonValue

from airlock.loop import Agent, DecisionError, Edit, SuspendedRunState
from airlock.loop.decisions import CallDecision
from airlock.loop.errors import ToolArgumentsError
from airlock.loop.events import DecisionSource
from airlock.loop.gate import Denied, Refused, Runs, resolve, settlement
from airlock.loop.state import PendingCall
from airlock.workers.http.inbox.forms import Field, FormError, decision_of
from airlock.workers.service import ConflictError
from airlock.workers.service.decisions import DecisionBody, to_loop_decisions
from airlock.workers.service.principals import Authority, ForbiddenError, approval_of


@dataclass(frozen=True)
class Outcome:
    """One call of the turn, once the decision is applied."""

    id: str
    number: int
    """Its place in the turn (1 for the first call)."""
    name: str
    runs: bool
    arguments: Mapping[str, JsonValue]
    """What it runs with (an edit's arguments, else the model's)."""
    edited: bool
    why: str
    """Whose decision it is, in plain words."""
    told: str | None = None
    """What the model is told instead of a result, for a call that does not run."""


@dataclass(frozen=True)
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None
    quorum: int = 1
    """How many distinct approvers must make this decision before anything runs."""

    @property
    def running(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.runs]

    @property
    def denied(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.runs]


def summary(
    agent: Agent | None,
    state: SuspendedRunState,
    form: Mapping[str, str],
    forms: Mapping[str, list[Field]],
    *,
    judge: Callable[[DecisionBody], Authority] | None = None,
) -> Summary:
    """What the decision ``form`` makes would do to the turn ``state`` waits on; a form
    the server would refuse gives the refusal instead. ``judge``: the service's own
    pipeline (identify → authorise → check the turn, recording nothing), which refuses
    what the signed-in approver may not decide and says the quorum the decision needs."""
    if agent is None:
        return Summary(error="this process does not know the run's agent")
    try:
        body = decision_of(
            {**form, "turn_digest": state.turn_digest}, list(state.pending_calls), forms
        )
        if body.decision == "withdraw":
            return Summary()
        chosen = set(body.calls or ())
        decisions = to_loop_decisions(body.stored(), state)
        authority = judge(body) if judge is not None else None
        resolved = resolve(agent, state, decisions)
    except (FormError, DecisionError, ValueError, ForbiddenError, ConflictError) as exc:
        return Summary(error=str(exc))
    outcomes = [
        _outcome(agent, state, number, call, decision, source=source, own=call.id in chosen)
        for number, (call, decision, source) in enumerate(resolved, start=1)
    ]
    if authority is not None:
        return Summary(outcomes, quorum=authority.quorum if authority.approves else 1)
    asked = {c.id: c for c in state.pending_calls if c.requires_approval}
    quorums = [approval_of(agent, asked[o.id])[1] for o in outcomes if o.runs and o.id in asked]
    return Summary(outcomes, quorum=max(quorums, default=1))


def _outcome(
    agent: Agent,
    state: SuspendedRunState,
    number: int,
    call: PendingCall,
    decision: CallDecision,
    *,
    source: DecisionSource,
    own: bool,
) -> Outcome:
    """As the runner settles the call (the loop's ``settlement``), then validates the
    arguments a call that runs is given."""
    arguments = decision.arguments if isinstance(decision, Edit) else call.arguments
    told: str | None = None
    match settlement(agent, state.tool_names, call, decision, source):
        case Refused(told=text) | Denied(told=text):
            told = text
        case Runs(tool=tool):
            try:
                tool.validate(arguments)
            except ToolArgumentsError as exc:
                told = f"Error: {exc}"
    why = _why(source, own)
    edited = arguments != call.arguments
    return Outcome(call.id, number, call.name, told is None, arguments, edited, why, told)


WHY: dict[str, str] = {
    "policy": "the approval policy decided it (final)",
    "read_only": "the whole turn's decision (a read-only call)",
    "unknown_tool": "no such tool",
    "invalid_arguments": "the model's arguments are invalid",
}


def _why(source: DecisionSource, own: bool) -> str:
    if source == "operator":
        return "this call's own choice" if own else "the whole turn's decision"
    return WHY.get(source, source)
