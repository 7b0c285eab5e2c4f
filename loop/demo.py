"""`python -m loop.demo`: one run that suspends, is serialised, and resumes."""

from __future__ import annotations

from loop import (
    Agent,
    ApprovalRequired,
    Approve,
    Effect,
    EventLog,
    ScriptedModel,
    SuspendedRunState,
    ToolContext,
    ToolLoop,
    event_payload,
    tool,
)


@tool
def lookup(q: str) -> str:
    """Find a customer by id."""
    return f"customer {q}: alice@example.com"


@tool(effect=Effect.WRITE)
def send_email(to: str, body: str, ctx: ToolContext) -> str:
    """Send an email."""
    return f"sent to {to} (idempotency key {ctx.idempotency_key})"


AGENT = Agent(
    name="mailer",
    model=ScriptedModel(
        [
            {"tool_calls": [{"name": "lookup", "arguments": {"q": "42"}}]},
            {
                "tool_calls": [
                    {"name": "send_email", "arguments": {"to": "alice@example.com", "body": "Hi"}}
                ],
                "usage": {"prompt_tokens": 120, "completion_tokens": 18},
            },
            {
                "content": "Mailed customer 42.",
                "usage": {"prompt_tokens": 160, "completion_tokens": 6},
            },
        ]
    ),
    tools=[lookup, send_email],
    instructions="You mail customers.",
)


def main() -> None:
    events = EventLog()
    loop = ToolLoop(events=events)
    try:
        loop.run(AGENT, "Mail customer 42")
        raise SystemExit("demo: the run did not wait for approval")
    except ApprovalRequired as pause:
        blob = pause.state.to_json()
    state = SuspendedRunState.from_json(blob)
    print(f"waiting for approval ({len(blob)} bytes of state), turn {state.turn_digest[:12]}")
    for call in state.pending_calls:
        print(f"  {call.id}: {call.name}({call.arguments}) effect={call.effect}")
    result = loop.resume(AGENT, state, Approve())
    for event in events.events:
        payload = event_payload(event)
        print(f"  event {payload.pop('kind')}: {payload}")
    print(
        f"{result.termination}: {result.output!r} after {result.iterations} model calls, "
        f"{result.usage.prompt_tokens}+{result.usage.completion_tokens} tokens"
    )


if __name__ == "__main__":
    main()
