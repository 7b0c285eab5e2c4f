"""The tutorial's agent (README.md's ``myagents.py``) ends by saying what its refund
call did: approved, the refund; denied, the denial, and never "refunded" (issue 47,
item 1: the scripted answer said "Order 17 is refunded 5.00." after a deny)."""

from __future__ import annotations

from typing import Any

import pytest

from airlock import Agent, ApprovalRequired, Approve, Deny, ToolLoop
from tests.docs.readme import File, readme_blocks


def _tutorial_agent() -> Agent:
    (block,) = [b for b in readme_blocks() if b.mark() == File("myagents.py")]
    namespace: dict[str, Any] = {"__name__": "myagents"}
    exec(compile(block.text, "myagents.py", "exec"), namespace)
    agent = namespace["REFUNDS"]
    assert isinstance(agent, Agent)
    return agent


def _decided(decision: Approve | Deny) -> str:
    agent, loop = _tutorial_agent(), ToolLoop()
    with pytest.raises(ApprovalRequired) as waiting:
        loop.run(agent, "Refund order 17", run_id="run-1")
    output = loop.resume(agent, waiting.value.state, decision).output
    assert output is not None
    return output


def test_denied_the_tutorial_says_so_and_not_refunded() -> None:
    said = _decided(Deny(reason="not this order"))
    assert "refunded" not in said
    assert "denied" in said and "not this order" in said


def test_approved_the_tutorial_says_refunded() -> None:
    assert "refunded 500 cents on order 17" in _decided(Approve())
