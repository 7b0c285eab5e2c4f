"""The inbox as an approver uses it, in Debian's Chromium (Playwright) against a real API
and worker on Redis and PostgreSQL: what will happen is said before a decision is sent
and is what happens; the queue says what is asked; a decided run keeps its story; the
phone layout cuts nothing; the keyboard works; axe-core finds no serious violation."""

from __future__ import annotations

from typing import Any

import pytest

from persistence.domain import RunStatus
from tests.integration.browsing import Inbox, browser, inbox

pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["browser", "inbox"]


def listed(page: Any, kind: str) -> list[str]:
    items = page.locator(f'#summary [data-outcome="{kind}"]')
    return [items.nth(i).get_attribute("data-call") for i in range(items.count())]


def test_a_deny_with_one_edited_call_runs_that_call_and_says_so_first(inbox: Inbox) -> None:
    run_id = inbox.start("two_notes")
    page = inbox.page()
    page.goto(f"{inbox.base}/inbox/runs/{run_id}")
    assert listed(page, "run") == ["call_0_0", "call_0_1"] and listed(page, "deny") == []

    page.locator('input[name="decision"][value="deny"]').check()
    page.get_by_label("Reason (required to deny; the model is told)").fill("not today")
    page.locator('#summary [data-outcome="deny"]').nth(1).wait_for()
    assert listed(page, "run") == [] and listed(page, "deny") == ["call_0_0", "call_0_1"]

    page.locator('input[name="call.call_0_1"][value="edit"]').check()
    page.locator('[id="edit.call_0_1.amount"]').fill("5")
    page.locator('#summary [data-outcome="run"]', has_text="amount = 5").wait_for()
    summary = page.locator("#summary").inner_text()
    assert listed(page, "run") == ["call_0_1"] and listed(page, "deny") == ["call_0_0"]
    assert "overrides the whole turn" in summary and "this call's own choice" in summary
    assert "was denied by the operator. Reason: not today" in summary
    inbox.shot(page, "inbox-run-summary.png")

    page.get_by_role("button", name="Submit decision").click()
    page.wait_for_url(f"{inbox.base}/inbox/runs/{run_id}?notice=recorded")
    inbox.stack.wait_status(run_id, RunStatus.COMPLETED)
    ran = [
        (e["payload"]["call_id"], e["payload"]["arguments"])
        for e in inbox.events(run_id)
        if e["kind"] == "tool"
    ]
    assert ran == [("call_0_1", {"to": "b@example.com", "amount": 5, "body": "second"})]
    assert inbox.stack.executions() == {f"send_note {run_id}:call_0_1": 1}

    # afterwards: the transcript stays, the timeline tells the edit and who decided
    page.locator("#run-status", has_text="completed").wait_for(timeout=15_000)
    assert "resumes" not in page.content()
    assert page.locator("#transcript-title").inner_text() == "Transcript"
    timeline = page.locator("table.timeline")
    assert "send_note (call 2): approved with edits" in timeline.inner_text()
    assert timeline.locator("ul.changes li").inner_text() == "amount: 2 → 5"
    assert "ann signed in via inbox" in timeline.inner_text()
    inbox.shot(page, "inbox-run-decided.png")
