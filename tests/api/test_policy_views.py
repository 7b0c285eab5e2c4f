"""The policy file's judgement as approvers see it: the run view's
``pending.calls[*].policy``, the inbox's run page in one line, and the events."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.api.conftest import Api, make_api
from tests.api.test_inbox import run_page, sign_in

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
RULE = "refund-over-100-needs-two-leads"


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    api = make_api(db_url, policy=str(EXAMPLE))
    yield api
    api.service.store.engine.dispose()


def test_the_run_view_and_the_inbox_show_the_rule(api: Api) -> None:
    view = api.waiting("refund_large")
    (call,) = view["pending"]["calls"]
    policy = call["policy"]
    assert (policy["rule"], policy["verdict"], policy["quorum"]) == (RULE, "ask", 2)
    assert policy["approvers"] == [["support-leads"]] and len(policy["sha256"]) == 64
    assert (call["approvers"], call["quorum"]) == (["support-leads"], 2)
    assert policy["line"].startswith(f'ask by rule "{RULE}" (policy {policy["sha256"][:12]})')
    sign_in(api)
    page = run_page(api, view["id"])
    assert f"Rule: <code>ask by rule &#34;{RULE}&#34;" in page


def test_a_policy_verdict_is_recorded_in_the_events(api: Api) -> None:
    run = api.create("refund_small")
    api.segment(run["id"])
    assert api.run(run["id"])["status"] == "completed"
    events = api.client.get(f"/v1/runs/{run['id']}/events", headers=api.headers()).json()
    decisions = [e["payload"] for e in events["events"] if e["kind"] == "decision"]
    assert [(d["source"], d["rule"]) for d in decisions] == [("policy", "refund-up-to-100-runs")]
    assert all(len(d["policy_sha256"]) == 64 for d in decisions)


def test_the_rules_expiry_sets_when_the_approval_expires(api: Api) -> None:
    view = api.waiting("refund_large")  # the agent sets no approval_ttl; the rule says 8h
    pending = view["pending"]
    waited = datetime.fromisoformat(pending["expires_at"]) - datetime.fromisoformat(
        pending["suspended_at"]
    )
    # both read the clock at suspension, a moment apart: 8 h, not the 0 of no expiry
    assert abs(waited - timedelta(hours=8)) < timedelta(minutes=1)
