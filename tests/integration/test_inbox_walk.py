"""The inbox as an approver uses it, in Debian's Chromium (Playwright) against a real API
and worker on Redis and PostgreSQL: what will happen is said before a decision is sent
and is what happens; the queue says what is asked; a decided run keeps its story; the
phone layout cuts nothing; the keyboard works; axe-core finds no serious violation."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.persistence.domain import RunStatus
from tests.integration.browsing import DESKTOP, PHONE, Inbox, audit, browser, inbox

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
    assert page.locator("#decided-by").inner_text() == "last decided by ann"
    inbox.shot(page, "inbox-run-decided.png")
    phone = inbox.page(**PHONE)
    phone.goto(f"{inbox.base}/inbox/runs/{run_id}")
    assert cut_off(phone, "table.timeline td") == [] and cut_off(phone, ".transcript li") == []
    assert phone.locator("table.timeline ul.changes li").is_visible()


def cut_off(page: Any, selector: str) -> list[str]:
    """The texts of cells under ``selector`` whose content is cut (wider than shown), and
    the page itself when it scrolls sideways."""
    cut: list[str] = page.evaluate(
        """(selector) => {
          const wide = (el) => el.scrollWidth > el.clientWidth + 1
            || el.getBoundingClientRect().right > innerWidth + 1;
          const cut = Array.from(document.querySelectorAll(selector)).filter(wide)
            .map((el) => el.innerText.slice(0, 40));
          const page = document.documentElement;
          if (page.scrollWidth > innerWidth) cut.push("the page scrolls sideways");
          return cut;
        }""",
        selector,
    )
    return cut


def on_a_phone(inbox: Inbox, run_id: str) -> None:
    """The queue and the run page at 390 px: each row a card, every cell shown whole."""
    phone = inbox.page(**PHONE, color_scheme="dark")
    assert cut_off(phone, "#rows td") == []
    for label in ("Run", "Asks", "Calls", "Requester", "Waiting", "Expires in", "Status"):
        assert phone.locator(f'#rows tr[data-run="{run_id}"] td[data-label="{label}"]').is_visible()
    inbox.shot(phone, "inbox-queue-phone-dark.png")
    phone.goto(f"{inbox.base}/inbox/runs/{run_id}")
    assert phone.locator('[id="edit.call_0_0.amount"]').get_attribute("inputmode") == "numeric"
    assert cut_off(phone, "table.timeline td") == []
    assert phone.locator('table.timeline td[data-label="What"]').first.is_visible()
    inbox.shot(phone, "inbox-run-phone-dark.png")
    phone.context.close()


def test_the_queue_says_what_is_asked_and_works_by_keyboard_and_on_a_phone(inbox: Inbox) -> None:
    first = inbox.start("notes", metadata={"ticket": "T-4711"}, requested_by="rita")
    second = inbox.start("notes", requested_by="rita")
    page = inbox.page()
    row = page.locator(f'#rows tr[data-run="{first}"]')
    text = row.inner_text()
    assert "send_note(to=ops@example.com, amount=12, body=<script>" in text
    assert "note it" in text and "ticket=T-4711" in text and "rita" in text
    assert "waiting for a decision" in text and "waiting_for_approval" not in text
    assert page.locator('input[inputmode="decimal"]').count() == 0
    inbox.shot(page, "inbox-queue-asks.png")

    on_a_phone(inbox, first)

    # by keyboard: move, see where, approve (a confirmation lists what will run), open
    page.keyboard.press("j")
    assert page.locator("#rows tr.current").get_attribute("data-run") == first
    assert page.evaluate("document.activeElement.closest('tr').dataset.run") == first
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline == "solid"  # the focus shows
    page.keyboard.press("j")
    page.keyboard.press("k")
    assert page.locator("#rows tr.current").get_attribute("data-run") == first
    page.keyboard.press("a")
    page.wait_for_url(f"{inbox.base}/inbox/bulk")
    planned = page.locator("ul.planned li")
    assert planned.count() == 1
    assert "send_note(to=ops@example.com, amount=12" in planned.inner_text()
    assert inbox.stack.run(first).status is RunStatus.WAITING_FOR_APPROVAL  # not yet
    inbox.shot(page, "inbox-bulk-confirm.png")
    page.keyboard.press("Enter")  # the confirmation's button has the focus
    page.locator("tr.ok").wait_for()
    inbox.stack.wait_status(first, RunStatus.COMPLETED)

    page.goto(f"{inbox.base}/inbox")
    page.keyboard.press("j")
    assert page.locator("#rows tr.current").get_attribute("data-run") == second
    page.keyboard.press("d")  # a deny needs a reason: the reason box is focused
    assert page.locator("#deny-needs-reason").is_visible()
    assert page.evaluate("document.activeElement.id") == "bulk-reason"
    page.keyboard.type("not this one")
    page.locator("#rows a.open").first.focus()
    page.keyboard.press("o")
    page.wait_for_url(f"{inbox.base}/inbox/runs/{second}")

    page.goto(f"{inbox.base}/inbox?status=recent")
    assert page.locator("h1").inner_text() == "Recently decided or finished"
    assert page.get_by_role("button", name="Approve selected…").count() == 0
    done = page.locator(f'#rows tr[data-run="{first}"]').inner_text()
    assert "approved by ann" in done and "completed" in done
    assert page.locator(f'#rows tr[data-run="{first}"] td[data-label="Calls"]').inner_text() == "1"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_serious_violation_on_a_desktop_or_a_phone(inbox: Inbox, scheme: str) -> None:
    run_id = inbox.start("two_notes", metadata={"ticket": "T-1"})
    found: dict[str, list[dict[str, Any]]] = {}
    for device, options in (("desktop", DESKTOP), ("phone", PHONE)):
        context = inbox.browser.new_context(**options, color_scheme=scheme)
        page = context.new_page()
        page.goto(f"{inbox.base}/inbox/login")
        found[f"{device} sign-in"] = audit(page)
        if device == "desktop" and scheme == "light":
            inbox.shot(page, "inbox-sign-in.png")
        page.close()
        context.close()
        page = inbox.page(**options, color_scheme=scheme)
        found[f"{device} queue"] = audit(page)
        page.goto(f"{inbox.base}/inbox/runs/{run_id}")
        page.locator('input[name="decision"][value="approve"]').check()  # nothing by default
        page.locator('input[name="call.call_0_1"][value="edit"]').check()
        page.locator('[id="edit.call_0_1.amount"]').fill("5")
        page.locator("#summary [data-outcome]", has_text="amount = 5").wait_for()
        found[f"{device} run"] = audit(page)
        page.get_by_label("Let the approval stand (a standing grant)").select_option("call")
        page.get_by_role("button", name="Submit decision").click()
        page.wait_for_url(f"{inbox.base}/inbox/runs/{run_id}?notice=recorded")
        inbox.stack.wait_status(run_id, RunStatus.COMPLETED)
        page.reload()
        found[f"{device} decided run"] = audit(page)
        page.goto(f"{inbox.base}/inbox/grants")
        assert page.get_by_role("button", name="Revoke").count() >= 1  # the unedited call's
        found[f"{device} grants"] = audit(page)
        page.context.close()
        run_id = inbox.start("two_notes")
    assert {where: v for where, v in found.items() if v} == {}
