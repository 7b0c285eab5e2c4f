"""The inbox on a phone (issue 47, item 6), in Debian's Chromium at a phone's viewport
against a real API and worker: the queue says how far a call is from its quorum, every
card's cells are labelled (the grants' too), the whole turn's approve and deny are two
large, separated, distinct choices with none made for you, and the "Decision recorded"
notice stays through the page's live refresh. The screenshots go to docs/ with
AIRLOCK_SCREENSHOTS=docs."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.persistence.domain import RunStatus
from tests.integration.browsing import PHONE, Inbox, browser, inbox

pytestmark = [pytest.mark.integration, pytest.mark.browser]
__all__ = ["browser", "inbox"]


def unlabelled_cells(page: Any) -> list[str]:
    """The cells of a card table (rows shown as cards on a phone) with no label."""
    cells = page.locator("table.cards tbody tr:not(:has(td.empty)) td:not(.pick)")
    return [cells.nth(i).inner_text() for i in range(cells.count())
            if cells.nth(i).get_attribute("data-label") is None]  # fmt: skip


def box(page: Any, selector: str) -> dict[str, float]:
    found: dict[str, float] = page.locator(selector).bounding_box()
    return found


def test_the_queue_shows_a_calls_quorum_and_labels_every_cell(inbox: Inbox) -> None:
    run_id = inbox.start("four_eyes")
    page = inbox.page(**PHONE)
    row = page.locator(f'tr[data-run="{run_id}"]')
    assert "0 of 2 approvals" in row.inner_text()
    assert unlabelled_cells(page) == []
    inbox.shot(page, "inbox-queue-phone.png")


def test_approve_and_deny_are_apart_distinct_and_chosen_on_purpose(inbox: Inbox) -> None:
    run_id = inbox.start("notes")
    page = inbox.page(**PHONE)
    page.goto(f"{inbox.base}/inbox/runs/{run_id}")
    approve, deny = "label.pick.approve", "label.pick.deny"
    assert page.locator('input[name="decision"]:checked').count() == 0  # none by default
    a, d = box(page, approve), box(page, deny)
    assert a["height"] >= 44 and d["height"] >= 44  # a finger's target
    apart = d["y"] - (a["y"] + a["height"]) if d["y"] > a["y"] else d["x"] - (a["x"] + a["width"])
    assert apart >= 16, (a, d)
    colour = "el => getComputedStyle(el).borderTopColor"
    assert page.locator(approve).evaluate(colour) != page.locator(deny).evaluate(colour)
    submit = box(page, "button.decide")
    assert submit["y"] > d["y"] + d["height"] + 16  # below the choices, not beside them

    page.get_by_role("button", name="Submit decision").click()  # nothing chosen: nothing sent
    assert "Choose approve or deny" in page.locator("#form-error").inner_text()
    assert inbox.stack.run(run_id).status is RunStatus.WAITING_FOR_APPROVAL

    page.locator(approve).click()
    page.get_by_label("Let the approval stand (a standing grant)").select_option("call")
    inbox.shot(page, "inbox-run-phone.png")
    page.get_by_role("button", name="Submit decision").click()
    page.wait_for_url(f"{inbox.base}/inbox/runs/{run_id}?notice=recorded")
    inbox.stack.wait_status(run_id, RunStatus.COMPLETED)
    # the live refresh shows the finished run, and the notice is still there
    page.locator("#run-status", has_text="completed").wait_for(timeout=15_000)
    notice = page.locator("p.notice[role=status]")
    assert "Decision recorded" in notice.inner_text()
    assert "finished" in notice.inner_text()
    inbox.shot(page, "inbox-run-decided-phone.png")

    page.goto(f"{inbox.base}/inbox/grants")
    assert page.get_by_role("button", name="Revoke").count() == 1
    assert unlabelled_cells(page) == []
    inbox.shot(page, "inbox-grants-phone.png")
