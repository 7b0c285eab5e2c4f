"""The built-in demo agents (the default ``AIRLOCK_AGENTS``), driven by ``ScriptedModel``."""

from __future__ import annotations

from datetime import timedelta

from airlock.loop import Agent, Effect, ScriptedModel, ToolContext, tool


@tool
def lookup_customer(customer_id: str) -> str:
    """Find a customer's name and email address."""
    return f"customer {customer_id}: Alice Example <alice@example.com>"


@tool(effect=Effect.WRITE)
def send_email(to: str, subject: str, body: str, ctx: ToolContext) -> str:
    """Send an email. Needs a person's approval."""
    return f"queued email to {to} ({subject!r}), idempotency key {ctx.idempotency_key}"


@tool(effect=Effect.IDEMPOTENT_WRITE)
def tag_customer(customer_id: str, tag: str, ctx: ToolContext) -> str:
    """Tag a customer record (safe to repeat). Needs a person's approval."""
    return f"customer {customer_id} tagged {tag!r}"


MAILER = Agent(
    name="mailer",
    instructions="You help the support team reach customers. Look customers up before mailing.",
    tools=[lookup_customer, send_email],
    approval_ttl=timedelta(days=2),
    model=ScriptedModel(
        [
            {
                "tool_calls": [{"name": "lookup_customer", "arguments": {"customer_id": "42"}}],
                "usage": {"prompt_tokens": 112, "completion_tokens": 14},
            },
            {
                "tool_calls": [
                    {
                        "name": "send_email",
                        "arguments": {
                            "to": "alice@example.com",
                            "subject": "Your refund",
                            "body": "Hi Alice, your refund is on its way.",
                        },
                    }
                ],
                "usage": {"prompt_tokens": 164, "completion_tokens": 41},
            },
            {
                "content": "I emailed Alice (customer 42) about her refund.",
                "usage": {"prompt_tokens": 230, "completion_tokens": 12},
            },
        ]
    ),
)

FOLLOW_UP = Agent(
    name="follow_up",
    instructions="You follow up with customers: one turn may tag and mail at once.",
    tools=[lookup_customer, send_email, tag_customer],
    model=ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "lookup_customer", "arguments": {"customer_id": "7"}},
                    {"name": "tag_customer", "arguments": {"customer_id": "7", "tag": "vip"}},
                    {
                        "name": "send_email",
                        "arguments": {
                            "to": "alice@example.com",
                            "subject": "Thank you",
                            "body": "Thanks for staying with us.",
                        },
                    },
                ],
                "usage": {"prompt_tokens": 140, "completion_tokens": 60},
            },
            {
                "content": "Tagged customer 7 as VIP and sent a thank-you note.",
                "usage": {"prompt_tokens": 260, "completion_tokens": 15},
            },
        ]
    ),
)

AGENTS = [MAILER, FOLLOW_UP]
