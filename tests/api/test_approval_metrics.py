"""The approval metrics of ``/metrics`` (DESIGN §9): how long runs wait for a person, by
agent and outcome; decisions by door and outcome; runs waiting; expiries. Told by the
service (``airlock.workers.service.watching``), so every door is counted, and only once."""

from __future__ import annotations

import time
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from tests.api.conftest import Api, make_api
from tests.api.test_api import approval, problem


def samples(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = api.client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(api: Api, name: str, **labels: str) -> float:
    return samples(api).get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_decision_is_counted_by_door_and_its_wait_by_agent_and_outcome(api: Api) -> None:
    view = api.waiting()
    assert value(api, "airlock_runs_waiting") == 1.0
    suspended = api.service.store.runs.require(view["id"]).suspended_at
    assert suspended is not None
    # the decision comes two hours after the suspension: the wait falls in the 4 h bucket
    api.service.clock = lambda: suspended + timedelta(hours=2)
    assert api.approve(view["id"], approval(view)).status_code == 202
    assert value(api, "airlock_decisions_total", door="webhook", outcome="recorded") == 1.0
    wait = {"agent": "w1", "outcome": "approved"}
    assert value(api, "airlock_approval_wait_seconds_count", **wait) == 1.0
    assert value(api, "airlock_approval_wait_seconds_sum", **wait) == 7200.0
    assert value(api, "airlock_approval_wait_seconds_bucket", le="3600.0", **wait) == 0.0
    assert value(api, "airlock_approval_wait_seconds_bucket", le="14400.0", **wait) == 1.0


def test_refusals_and_repeats_are_counted_but_end_no_wait(api: Api) -> None:
    view = api.waiting()
    body = approval(view)
    assert api.approve(view["id"], body, webhook_id="msg_a").status_code == 202
    assert api.approve(view["id"], body, webhook_id="msg_a").status_code == 200
    problem(api.approve(view["id"], approval(view, decision="deny")), 409)
    problem(api.approve("00000000-0000-0000-0000-000000000000", body), 404)
    assert value(api, "airlock_decisions_total", door="webhook", outcome="recorded") == 1.0
    assert value(api, "airlock_decisions_total", door="webhook", outcome="duplicate") == 1.0
    assert value(api, "airlock_decisions_total", door="webhook", outcome="conflict") == 1.0
    assert value(api, "airlock_decisions_total", door="webhook", outcome="not_found") == 1.0
    waits = "airlock_approval_wait_seconds_count"
    assert value(api, waits, agent="w1", outcome="approved") == 1.0
    assert value(api, waits, agent="w1", outcome="denied") == 0.0


def test_every_door_through_the_service_is_counted(api: Api) -> None:
    """A door other than the webhook (here the CLI's operator, through the service the
    API's metrics watch) is counted under its own name."""
    view = api.waiting()
    body = DecisionBody(turn_digest=view["pending"]["turn_digest"], decision="deny", reason="no")
    api.service.record_decision(view["id"], body, Principal.operator("ops"))
    assert value(api, "airlock_decisions_total", door="cli", outcome="recorded") == 1.0
    assert value(api, "airlock_approval_wait_seconds_count", agent="w1", outcome="denied") == 1.0
    assert value(api, "airlock_decisions_total", door="webhook", outcome="recorded") == 0.0


def test_runs_waiting_is_the_store_s_count(api: Api, db_url: str) -> None:
    first, second = api.waiting(), api.waiting()
    assert api.approve(first["id"], approval(first)).status_code == 202
    assert second["status"] == "waiting_for_approval"
    # the API reads the store at most every 5 s, however often it is scraped: another
    # API on the same database reads it now
    other = make_api(db_url)
    try:
        assert value(other, "airlock_runs_waiting") == 1.0
    finally:
        other.service.store.engine.dispose()


def test_an_expiry_ends_the_wait_as_expired(api: Api) -> None:
    denied = api.waiting("expires_deny")
    cancelled = api.waiting("expires_cancel")
    # their approval_ttl is 1 s: the expiry applies once it has passed (polled)
    expired: set[str] = set()
    deadline = time.monotonic() + 30
    while expired != {denied["id"], cancelled["id"]} and time.monotonic() < deadline:
        time.sleep(0.05)
        expired |= set(api.service.expire_approvals())
    assert expired == {denied["id"], cancelled["id"]}
    for agent in ("expires_deny", "expires_cancel"):
        assert value(api, "airlock_approval_expiries_total", agent=agent) == 1.0
        assert value(api, "airlock_approval_wait_seconds_count", agent=agent, outcome="expired")
    assert value(api, "airlock_decisions_total", door="expiry", outcome="recorded") == 2.0
