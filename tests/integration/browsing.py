"""What the inbox's browser tests share: Debian's Chromium driven by Playwright, a
stack with an API and a worker, a signed-in page, and the axe-core audit (served
from tests/integration/axe, never from a CDN)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from airlock.persistence.domain import RunStatus
from airlock.workers.testing import SECRET, TOKEN, Stack
from tests.integration.conftest import StackFactory

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"
SCREENSHOTS = os.environ.get("AIRLOCK_SCREENSHOTS") == "docs"
"""Set to ``docs`` to refresh docs/inbox.md's screenshots in docs/ (by default they go to
the test's own folder, so a test run leaves the tree as it was)."""
AXE = Path(__file__).with_name("axe") / "axe.min.js"
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
PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
}
DESKTOP: dict[str, Any] = {"viewport": {"width": 1100, "height": 900}}


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


@dataclass
class Inbox:
    """A running stack and its base URL, with what a browser test does to it."""

    stack: Stack
    base: str
    browser: Any
    shots: Path

    def start(self, agent: str, **extra: Any) -> str:
        """Start a run of ``agent`` and return its id once it waits for approval."""
        created = httpx.post(
            f"{self.base}/v1/runs", json={"agent": agent, "input": "note it", **extra}, headers=AUTH
        )
        assert created.status_code in (200, 201), created.text
        run_id: str = created.json()["id"]
        self.stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL)
        return run_id

    def events(self, run_id: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.base}/v1/runs/{run_id}/events", headers=AUTH)
        assert answer.status_code == 200, answer.text
        events: list[dict[str, Any]] = answer.json()["events"]
        return events

    def page(self, name: str = "ann", **options: Any) -> Any:
        """A new page in its own context, signed in as ``name``."""
        context = self.browser.new_context(**{**DESKTOP, **options})
        page = context.new_page()
        page.goto(f"{self.base}/inbox/login")
        page.get_by_label("Your name").fill(name)
        page.get_by_label("Token").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{self.base}/inbox")
        return page

    def shot(self, page: Any, name: str) -> None:
        self.shots.mkdir(exist_ok=True)
        page.screenshot(path=str(self.shots / name), full_page=True)


@pytest.fixture
def inbox(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, browser: Any, tmp_path: Path
) -> Inbox:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_WEBHOOK_SECRET=SECRET,
        AIRLOCK_API_TOKEN=TOKEN,
    )
    base = stack.api()
    stack.worker()
    return Inbox(stack, base, browser, DOCS if SCREENSHOTS else tmp_path)


def audit(page: Any) -> list[dict[str, Any]]:
    """The page's serious and critical accessibility violations, by axe-core."""
    page.evaluate(AXE.read_text())  # evaluated by the browser's devtools: no CSP hole needed
    found: list[dict[str, Any]] = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]]}
        for v in found
        if v["impact"] in ("serious", "critical")
    ]
