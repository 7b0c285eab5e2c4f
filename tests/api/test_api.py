"""Every answer of the HTTP API, through the real app, against a real database."""

from __future__ import annotations

import json
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest

from airlock.workers.service.principals import Principal
from airlock.workers.service.views import EventPage, RunPage, RunView
from airlock.workers.testing import SECRET
from tests.api.conftest import OLD_SECRET, Api

OPERATOR = Principal.trusted("test")


def snapshot(api: Api, run_id: str) -> tuple[Any, ...]:
    run = api.service.store.runs.require(run_id)
    return (run, len(api.service.store.events.read(run_id)), list(api.enqueued))


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["detail"]
    return body


# -- runs -------------------------------------------------------------------------------


def test_create_and_read_a_run(api: Api) -> None:
    created = api.create(metadata={"ticket": 7})
    assert created["status"] == "queued" and created["agent"] == "w1"
    assert created["metadata"] == {"ticket": 7} and created["pending"] is None
    assert api.enqueued == [created["id"]]
    assert set(created) == {
        "id", "agent", "status", "termination", "iterations", "usage", "output", "error",
        "metadata", "created_at", "updated_at", "pending",
    }  # fmt: skip


def test_same_idempotency_key_returns_the_same_run(api: Api) -> None:
    first = api.client.post(
        "/v1/runs",
        json={"agent": "w1", "input": "x", "idempotency_key": "k"},
        headers=api.headers(),
    )
    again = api.client.post(
        "/v1/runs",
        json={"agent": "w1", "input": "x", "idempotency_key": "k"},
        headers=api.headers(),
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert len(api.enqueued) == 1


@pytest.mark.parametrize(
    "body",
    [{"agent": "nope", "input": "x"}, {"input": "x"}, {"agent": "w1", "input": 3}, {"agent": "w1"}],
)
def test_bad_create_requests_are_422(api: Api, body: dict[str, Any]) -> None:
    problem(api.client.post("/v1/runs", json=body, headers=api.headers()), 422)
    assert api.enqueued == []


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "x"}])
def test_run_endpoints_need_the_bearer_token(api: Api, headers: dict[str, str]) -> None:
    run = api.create()
    for method, path in [
        ("post", "/v1/runs"),
        ("get", "/v1/runs"),
        ("get", f"/v1/runs/{run['id']}"),
        ("get", f"/v1/runs/{run['id']}/events"),
        ("post", f"/v1/runs/{run['id']}/cancel"),
        ("post", f"/v1/runs/{run['id']}/retry"),
    ]:
        response = api.client.request(
            method, path, headers=headers, json={"agent": "w1", "input": "x"}
        )
        problem(response, 401)
    assert api.service.store.runs.require(run["id"]).status.value == "queued"


def test_waiting_run_shows_what_is_to_be_approved(api: Api) -> None:
    view = api.waiting()
    pending = view["pending"]
    assert len(pending["turn_digest"]) == 64 and pending["suspended_at"]
    assert pending["calls"] == [
        {
            "id": "call_1_0",
            "name": "send_email",
            "arguments": {"to": "a@example.com", "body": "hi", "seconds": 0.0},
            "effect": "write",
            "requires_approval": True,
            "verdict": "asks",
            "policy_reason": None,
            "approvers": [],
            "quorum": 1,
            "approvals": [],
            "policy": None,
        }
    ]
    assert (view["iterations"], view["usage"]) == (2, {"prompt_tokens": 30, "completion_tokens": 5})
    assert "suspended_state" not in json.dumps(view)


def test_unknown_run_is_404(api: Api) -> None:
    for run_id in [str(uuid.uuid4()), "not-a-uuid"]:
        problem(api.client.get(f"/v1/runs/{run_id}", headers=api.headers()), 404)
        problem(api.client.get(f"/v1/runs/{run_id}/events", headers=api.headers()), 404)
        problem(api.client.post(f"/v1/runs/{run_id}/cancel", headers=api.headers()), 404)


def test_list_filters_and_keyset_cursor(api: Api) -> None:
    ids = [api.create()["id"] for _ in range(5)]
    api.service.cancel(ids[0], by=OPERATOR)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.client.get("/v1/runs", params=params, headers=api.headers()).json()
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    cancelled = api.client.get("/v1/runs", params={"status": "cancelled"}, headers=api.headers())
    assert [r["id"] for r in cancelled.json()["runs"]] == [ids[0]]
    problem(api.client.get("/v1/runs", params={"status": "bogus"}, headers=api.headers()), 422)
    problem(api.client.get("/v1/runs", params={"cursor": "!!"}, headers=api.headers()), 422)
    problem(api.client.get("/v1/runs", params={"limit": 0}, headers=api.headers()), 422)


def test_events_tell_the_story(api: Api) -> None:
    view = api.waiting()
    events = api.client.get(f"/v1/runs/{view['id']}/events", headers=api.headers()).json()["events"]
    assert [e["kind"] for e in events] == ["request", "llm", "tool", "llm", "suspended"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    later = api.client.get(
        f"/v1/runs/{view['id']}/events", params={"after": 3}, headers=api.headers()
    ).json()["events"]
    assert [e["seq"] for e in later] == [4, 5]
    past_the_end = api.client.get(
        f"/v1/runs/{view['id']}/events", params={"after": 5}, headers=api.headers()
    )
    assert past_the_end.status_code == 200 and past_the_end.json()["events"] == []


def test_cancel_and_retry(api: Api) -> None:
    run = api.create()
    cancelled = api.client.post(f"/v1/runs/{run['id']}/cancel", headers=api.headers())
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    problem(api.client.post(f"/v1/runs/{run['id']}/cancel", headers=api.headers()), 409)
    problem(api.client.post(f"/v1/runs/{run['id']}/retry", headers=api.headers()), 409)

    failing = api.create("w1")
    api.service.store.transitions.claim(failing["id"], "w", api.service.limits.lease)
    api.service.store.transitions.finish(
        failing["id"], api.service.store.runs.require(failing["id"]).status.FAILED, error="boom"
    )
    retried = api.client.post(f"/v1/runs/{failing['id']}/retry", headers=api.headers())
    assert retried.status_code == 202 and retried.json()["status"] == "queued"
    assert api.enqueued[-1] == failing["id"]


# -- the approval webhook ---------------------------------------------------------------


def approval(view: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"turn_digest": view["pending"]["turn_digest"], "decision": "approve", **extra}


def test_approval_is_202_once_then_200(api: Api) -> None:
    view = api.waiting()
    api.enqueued.clear()
    first = api.approve(view["id"], approval(view, approver="ann"), webhook_id="msg_1")
    assert first.status_code == 202, first.text
    assert first.json()["result"] == "recorded" and first.json()["approver"] == "ann"
    assert api.run(view["id"])["status"] == "queued"
    assert api.enqueued == [view["id"]]

    replay = api.approve(view["id"], approval(view, approver="ann"), webhook_id="msg_1")
    assert replay.status_code == 200 and replay.json()["result"] == "duplicate"
    same = api.approve(view["id"], approval(view, approver="bob"))
    assert same.status_code == 200
    assert api.enqueued == [view["id"]]
    decision = [e for e in api.service.store.events.read(view["id"]) if e.kind == "decision"]
    assert len(decision) == 1 and decision[0].payload["approver"] == "ann"

    conflicting = api.approve(view["id"], approval(view, decision="deny", reason="no"))
    problem(conflicting, 409)


def test_replayed_webhook_id_after_the_run_moved_on_is_still_200(api: Api) -> None:
    view = api.waiting()
    assert api.approve(view["id"], approval(view), webhook_id="msg_x").status_code == 202
    api.segment(view["id"])
    assert api.run(view["id"])["status"] == "completed"
    assert api.approve(view["id"], approval(view), webhook_id="msg_x").status_code == 200


def test_per_call_decisions_and_edits(api: Api) -> None:
    view = api.waiting()
    body = approval(
        view, calls={"call_1_0": {"decision": "edit", "arguments": {"to": "b@x.com", "body": "yo"}}}
    )
    assert api.approve(view["id"], body).status_code == 202
    api.segment(view["id"])
    ledger = api.service.store.ledger.entries(view["id"])
    assert [(e.tool, e.status.value) for e in ledger] == [
        ("lookup", "succeeded"),
        ("send_email", "succeeded"),
    ]
    assert "b@x.com" in (ledger[1].result or "")


@pytest.mark.parametrize(
    ("mutate", "status"),
    [
        pytest.param(
            lambda a, v, b: a.approve(v["id"], b, secret=OLD_SECRET.replace("b", "c")),
            401,
            id="wrong-key",
        ),
        pytest.param(
            lambda a, v, b: a.approve(v["id"], b, headers={"content-type": "application/json"}),
            401,
            id="unsigned",
        ),
        pytest.param(
            lambda a, v, b: a.approve(v["id"], b, timestamp=time.time() - 600), 401, id="stale"
        ),
        pytest.param(
            lambda a, v, b: a.approve(v["id"], b, timestamp=time.time() + 600), 401, id="future"
        ),
        pytest.param(
            lambda a, v, b: a.approve(v["id"], {**b, "turn_digest": "0" * 64}), 409, id="other-turn"
        ),
        pytest.param(lambda a, v, b: a.approve(str(uuid.uuid4()), b), 404, id="unknown-run"),
        pytest.param(
            lambda a, v, b: a.approve(v["id"], {**b, "calls": {"nope": {"decision": "approve"}}}),
            422,
            id="unknown-call",
        ),
        pytest.param(
            lambda a, v, b: a.approve(
                v["id"], {**b, "calls": {"call_1_0": {"decision": "edit", "arguments": {"to": 5}}}}
            ),
            422,
            id="bad-edit",
        ),
        pytest.param(lambda a, v, b: a.approve(v["id"], b, raw=b"x" * 70_000), 413, id="too-large"),
        pytest.param(lambda a, v, b: a.approve(v["id"], b, raw=b"{not json"), 422, id="malformed"),
        pytest.param(
            lambda a, v, b: a.approve(v["id"], {**b, "decision": "maybe"}), 422, id="bad-decision"
        ),
        pytest.param(
            lambda a, v, b: a.approve(v["id"], {"decision": "approve"}), 422, id="no-digest"
        ),
    ],
)
def test_bad_approvals_change_nothing(api: Api, mutate: Any, status: int) -> None:
    view = api.waiting()
    api.enqueued.clear()
    before = snapshot(api, view["id"])
    problem(mutate(api, view, approval(view)), status)
    assert snapshot(api, view["id"]) == before
    assert (
        api.service.store.decisions.decision_for(view["id"], view["pending"]["turn_digest"]) is None
    )


def test_approval_of_a_run_that_is_not_waiting_is_409(api: Api) -> None:
    view = api.waiting()
    api.service.cancel(view["id"], by=OPERATOR)
    problem(api.approve(view["id"], approval(view)), 409)


def test_several_signatures_and_a_rotated_secret(api: Api) -> None:
    view = api.waiting()
    body = json.dumps(approval(view)).encode()
    signed = api.approve(view["id"], {}, raw=body, secret=OLD_SECRET, webhook_id="msg_old")
    assert signed.status_code == 202  # the old secret still verifies during rotation

    other = api.waiting()
    body = json.dumps(approval(other)).encode()
    from datetime import UTC, datetime

    from standardwebhooks import Webhook

    now = int(time.time())
    good = Webhook(SECRET).sign("msg_multi", datetime.fromtimestamp(now, UTC), body.decode())
    headers = {
        "webhook-id": "msg_multi",
        "webhook-timestamp": str(now),
        "webhook-signature": f"v1,Ym9ndXM= {good}",
    }
    assert api.approve(other["id"], {}, raw=body, headers=headers).status_code == 202


def test_approvals_are_disabled_without_a_secret(db_url: str) -> None:
    from tests.api.conftest import make_api

    api = make_api(db_url, webhook_secret="")
    view = api.waiting()
    problem(api.approve(view["id"], approval(view)), 503)
    api.service.store.engine.dispose()


# -- operations -------------------------------------------------------------------------


def test_health_readiness_metrics_openapi(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"
    view = api.waiting()
    api.approve(view["id"], approval(view))
    api.approve(view["id"], {}, raw=b"{}", headers={"content-type": "application/json"})
    metrics = api.client.get("/metrics").text
    assert 'airlock_runs{status="queued"} 1.0' in metrics
    assert 'airlock_decisions_total{door="webhook",outcome="recorded"} 1.0' in metrics
    assert 'airlock_webhook_rejections_total{reason="missing_headers"} 1.0' in metrics
    assert "airlock_oldest_waiting_approval_seconds" in metrics
    spec = api.client.get("/openapi.json").json()
    assert "/v1/runs/{run_id}/approval" in spec["paths"]


def test_readiness_shows_the_sweeper_without_depending_on_it(api: Api) -> None:
    """A fresh deployment (no beat yet) is ready, and says the sweeper never ran; once
    it ran, /readyz says when (issue 27, defect 1: the beat's health was invisible)."""
    fresh = api.client.get("/readyz")
    assert fresh.status_code == 200
    assert fresh.json()["sweeper"]["state"] == "never"
    assert fresh.json()["sweeper"]["last_run_at"] is None
    api.service.sweep()
    swept = api.client.get("/readyz").json()["sweeper"]
    assert swept["state"] == "ok" and swept["last_run_at"] is not None
    assert 0 <= swept["age_seconds"] < swept["stale_after_seconds"]


def test_the_openapi_document_describes_the_views_the_api_sends(api: Api) -> None:
    """The handlers send their JSON unvalidated; the models that document it must
    hold what is sent (each forbids fields it does not name)."""
    spec = api.client.get("/openapi.json").json()
    one = spec["paths"]["/v1/runs/{run_id}"]["get"]["responses"]["200"]
    assert one["content"]["application/json"]["schema"]["$ref"].endswith("/RunView")
    assert "pending" in spec["components"]["schemas"]["RunView"]["properties"]
    created = spec["paths"]["/v1/runs"]["post"]["responses"]
    assert {"200", "201"} <= set(created)
    waiting = api.waiting()
    RunView.model_validate(waiting)
    assert waiting["pending"]["calls"]
    assert api.approve(waiting["id"], approval(waiting)).status_code == 202
    api.segment(waiting["id"])
    done = api.run(waiting["id"])
    assert RunView.model_validate(done).status == "completed"
    headers = api.headers()
    RunPage.model_validate(api.client.get("/v1/runs", headers=headers).json())
    events = api.client.get(f"/v1/runs/{done['id']}/events", headers=headers).json()
    assert EventPage.model_validate(events).events


def test_scrapes_count_runs_in_the_database_at_most_every_few_seconds(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[int] = []
    count_by_status = api.service.reader.queries.count_by_status

    def counting() -> Any:
        counted.append(1)
        return count_by_status()

    monkeypatch.setattr(api.service.reader.queries, "count_by_status", counting)
    for _ in range(5):
        metrics = api.client.get("/metrics").text
    assert len(counted) == 1
    assert "airlock_notifications_due 0.0" in metrics
    assert "airlock_notifications_given_up 0.0" in metrics


def test_metrics_show_the_lag_of_the_last_notifications_delivered(api: Api) -> None:
    """Issue 46: notification lag (transition → 2xx) on ``/metrics``, read from the
    outbox (the workers that deliver serve their own histogram)."""
    created = api.client.post(
        "/v1/runs", json={"agent": "w1", "input": "x"}, headers=api.headers()
    ).json()
    outbox = api.service.store.outbox
    outbox.add(created["id"], "run.completed")
    [taken] = outbox.claim(1, timedelta(seconds=60))
    outbox.delivered(taken, "{}", 204)
    metrics = api.client.get("/metrics").text
    assert 'airlock_notification_lag_seconds{quantile="0.5"}' in metrics
    assert 'airlock_notification_lag_seconds{quantile="0.99"}' in metrics
