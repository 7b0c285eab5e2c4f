"""An example agent on a real model provider.

    export OPENAI_API_KEY=...                  # or ANTHROPIC_API_KEY, with PROVIDER=anthropic
    AIRLOCK_AGENTS=examples.support:AGENTS airlock dev

Any OpenAI-compatible endpoint works: set OPENAI_BASE_URL (vLLM, Ollama at
http://localhost:11434/v1, a LiteLLM proxy, Azure's deployment URL) and MODEL.
"""

from __future__ import annotations

import os
from datetime import timedelta

from pydantic import JsonValue

from airlock import Agent, AnthropicModel, Effect, Model, OpenAIModel, ToolContext, tool

ORDERS: dict[str, JsonValue] = {
    "17": {"customer": "alice@example.com", "total_cents": 4200, "status": "delivered"}
}


@tool
def find_order(order_id: str) -> JsonValue:
    """Look an order up by its id."""
    return ORDERS.get(order_id, {"error": f"no order {order_id}"})


@tool(effect=Effect.IDEMPOTENT_WRITE)
def refund(order_id: str, amount_cents: int, reason: str, ctx: ToolContext) -> str:
    """Refund part or all of an order. A person approves every refund first."""
    # a real implementation passes ctx.idempotency_key to the payment provider
    return f"refunded {amount_cents} cents on order {order_id} (key {ctx.idempotency_key})"


@tool(effect=Effect.WRITE)
def email_customer(to: str, subject: str, body: str) -> str:
    """Email a customer. A person approves every email first."""
    return f"emailed {to}: {subject}"


def model() -> Model:
    if os.environ.get("PROVIDER") == "anthropic":
        return AnthropicModel(model=os.environ.get("MODEL", "claude-sonnet-4-5"), max_tokens=1024)
    return OpenAIModel(model=os.environ.get("MODEL", "gpt-4o-mini"), temperature=0)


SUPPORT = Agent(
    name="support",
    instructions=(
        "You are a support agent. Look orders up before acting. Refund only what the "
        "customer asks for, then email them a short confirmation."
    ),
    model=model(),
    tools=[find_order, refund, email_customer],
    max_iterations=8,
    token_budget=50_000,
    approval_ttl=timedelta(hours=8),
)

AGENTS = [SUPPORT]
