"""The inbox in a real headless Chromium (Debian's, driven by Playwright), against a real
API process and a real worker on Redis and PostgreSQL: a run waits, appears in the
queue, is opened, edited (a schema error is shown and nothing sent), approved, and
completes; a stale tab is told the turn was decided; a tool argument holding markup
is shown as text; the page asks nothing of any host but its own. The screenshots of
the queue and of a run page go to docs/."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from airlock.persistence.domain import RunStatus
from airlock.workers.testing import SECRET, TOKEN
from tests.integration.agents import HOSTILE_BODY
from tests.integration.conftest import StackFactory

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"
SCREENSHOTS = os.environ.get("AIRLOCK_SCREENSHOTS") == "docs"
"""Set to ``docs`` to refresh docs/inbox.md's screenshots in docs/ (by default they go to
the test's own folder, so a test run leaves the tree as it was)."""
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (scripts/test installs it)")
    if not Path(CHROMIUM).exists():
        pytest.skip(
            "no Chromium at /usr/bin/chromium: scripts/test installs Debian's chromium "
            "with apt-get; it could not be installed here"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


def test_an_approver_walks_the_inbox_in_a_real_browser(  # noqa: PLR0915 - one walk
    make_stack: StackFactory, postgres_url: str, shared_redis: str, browser: Any, tmp_path: Path
) -> None:
    shots = DOCS if SCREENSHOTS else tmp_path
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_WEBHOOK_SECRET=SECRET,
        AIRLOCK_API_TOKEN=TOKEN,
    )
    base = stack.api()
    stack.worker()
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    hosts: set[str] = set()
    dialogs: list[str] = []
    context.on("request", lambda request: hosts.add(urlsplit(request.url).netloc))
    page = context.new_page()

    def refuse(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)

    # sign in; the queue is empty, then the run that starts waiting appears by itself
    page.goto(f"{base}/inbox")
    assert page.url.endswith("/inbox/login")
    page.get_by_label("Your name").fill("ann")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}/inbox")
    created = httpx.post(
        f"{base}/v1/runs",
        json={"agent": "notes", "input": "note it", "requested_by": "rita"},
        headers=AUTH,
    )
    run_id = created.json()["id"]
    stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL)
    row = page.locator("#rows tr", has_text=run_id[:8])
    row.wait_for(timeout=15_000)  # the table refreshes itself
    assert "rita" in row.inner_text() and "send_note" in row.inner_text()
    shots.mkdir(exist_ok=True)
    page.screenshot(path=str(shots / "inbox-queue.png"), full_page=True)
    phone = browser.new_context(
        viewport={"width": 390, "height": 844}, color_scheme="dark", is_mobile=True
    )
    phone.add_cookies(context.cookies())
    dark = phone.new_page()
    dark.goto(f"{base}/inbox/runs/{run_id}")
    dark.screenshot(path=str(shots / "inbox-run-dark-phone.png"), full_page=True)
    phone.close()

    # open it, in this tab and in a second one that will go stale
    row.get_by_role("link").click()
    page.wait_for_url(f"{base}/inbox/runs/{run_id}")
    stale = context.new_page()
    stale.goto(f"{base}/inbox/runs/{run_id}")
    # its approver starts a deny there: the page, following the run, keeps the form
    stale.locator('input[name="decision"][value="deny"]').check()
    stale.get_by_label("Reason (required to deny; the model is told)").fill("too late")

    # the model's markup is text: shown, never run
    assert page.get_by_text(HOSTILE_BODY).count() >= 1
    assert page.title() != "pwned" and dialogs == []

    # an edit that breaks the schema is shown and nothing is sent
    page.locator('input[name="call.call_0_0"][value="edit"]').check()
    amount = page.locator('[id="edit.call_0_0.amount"]')
    amount.fill("12.5")
    assert (
        "amount must be a whole number"
        in page.locator('[data-error-for="edit.call_0_0.amount"]').inner_text()
    )
    page.get_by_role("button", name="Submit decision").click()
    assert "nothing was sent" in page.locator("#form-error").inner_text()
    assert (
        stack.service.store.decisions.decision_for(run_id, stack.run(run_id).turn_digest or "")
        is None
    )
    assert page.url == f"{base}/inbox/runs/{run_id}"

    # a valid edit: the diff against the model's arguments shows before it is sent
    amount.fill("7")
    diff = page.locator('[data-diff="call_0_0"]').inner_text()
    assert "amount" in diff and "12" in diff and "7" in diff
    assert page.locator("#form-error").is_hidden()  # cleared once the fields are valid
    page.locator('input[name="decision"][value="approve"]').check()  # nothing by default
    page.screenshot(path=str(shots / "inbox-run.png"), full_page=True)
    page.get_by_role("button", name="Submit decision").click()
    page.wait_for_url(f"{base}/inbox/runs/{run_id}?notice=recorded")
    stack.wait_status(run_id, RunStatus.COMPLETED)
    page.locator("#run-status", has_text="completed").wait_for(timeout=15_000)
    timeline = page.locator("table.timeline").inner_text()
    assert "ann" in timeline and "inbox" in timeline
    assert stack.executions()[f"send_note {run_id}:call_0_0"] == 1

    # the stale tab says the run moved on, and cannot release what was decided
    stale.locator("#moved-on").wait_for(timeout=15_000)
    stale.get_by_role("button", name="Submit decision").click()
    assert "this turn was already decided" in stale.locator("#error").inner_text()

    assert hosts == {urlsplit(base).netloc}, hosts
    context.close()
