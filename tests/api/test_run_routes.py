"""``GET /v1/runs/{id}``, ``POST /v1/runs`` and ``POST /v1/runs/{id}/approval``, the
requests every run makes, on the app's one router (the poll and the approval are its
plain routes, ``airlock.workers.http.api.PlainRoute``): the same status, type and body as the
run's view and FastAPI's refusals, for every kind of id, body and caller. And
FastAPI's telemetry is decided once, when the app is built."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.routing import APIRoute
from opentelemetry import trace

from airlock.workers.http import api as api_module
from airlock.workers.http.problems import SafeJSONResponse
from airlock.workers.service.views import run_view
from airlock.workers.testing import TOKEN
from tests.api.conftest import Api, make_api


@pytest.fixture
def api(db_url: str) -> Iterator[Api]:
    api = make_api(db_url)
    yield api
    api.service.store.engine.dispose()


def answer(response: Any) -> tuple[int, str | None, bytes]:
    return response.status_code, response.headers.get("content-type"), response.content


BEARER = {"Authorization": f"Bearer {TOKEN}"}
PROBLEM = "application/problem+json"


def view_of(api: Api, run_id: str) -> tuple[int, str | None, bytes]:
    """What ``GET /v1/runs/{run_id}`` must answer: the run's view, as the service has it."""
    expected = SafeJSONResponse(run_view(api.service, api.service.get_run(run_id)))
    return 200, expected.headers["content-type"], bytes(expected.body)


def test_the_poll_answers_every_run_with_its_view(api: Api) -> None:
    queued = api.create(metadata={"who": "José \u2603"})
    waiting = api.waiting()
    done = api.waiting()
    decision = {"turn_digest": done["pending"]["turn_digest"], "decision": "approve"}
    assert api.approve(done["id"], decision).status_code == 202
    api.segment(done["id"])
    for run_id in (queued["id"], waiting["id"], done["id"]):
        path = f"/v1/runs/{run_id}"
        got = api.client.get(path, headers=BEARER)
        assert got.status_code == 200, got.text
        assert answer(got) == view_of(api, run_id)
    assert api.client.get(f"/v1/runs/{waiting['id']}", headers=BEARER).json()["pending"]
    assert api.client.get(f"/v1/runs/{done['id']}", headers=BEARER).json()["status"] == (
        "completed"
    )


@pytest.mark.parametrize(
    ("path", "headers", "status", "title"),
    [
        ("/v1/runs/00000000000000000000000000000000", BEARER, 404, "Not found"),  # no such run
        ("/v1/runs/not-a-run-id", BEARER, 404, "Not found"),
        ("/v1/runs/%00", BEARER, 404, "Not found"),
        ("/v1/runs/%ED%A0%80", BEARER, 404, "Not found"),  # a lone surrogate's UTF-8 bytes
        ("/v1/runs/" + "a" * 5000, BEARER, 404, "Not found"),
        ("/v1/runs/x?after=1&limit=-5", BEARER, 404, "Not found"),
        ("/v1/runs/00000000000000000000000000000000", {}, 401, "Unauthorized"),  # no token
        (
            "/v1/runs/00000000000000000000000000000000",
            {"Authorization": "Bearer wrong"},
            401,
            "Unauthorized",
        ),
        ("/v1/runs/", BEARER, 200, None),
        ("/v1/runs", BEARER, 200, None),
    ],
)
def test_a_refused_poll_is_a_problem(
    api: Api, path: str, headers: dict[str, str], status: int, title: str | None
) -> None:
    got = api.client.get(path, headers=headers)
    assert got.status_code in (200, 401, 404), got.text
    assert got.status_code == status, got.text
    if title is not None:
        assert got.headers["content-type"] == PROBLEM
        assert got.json()["title"] == title and got.json()["status"] == status


def test_what_the_poll_does_not_take_goes_on_to_the_other_routes(api: Api) -> None:
    run = api.create()
    for method, path, status in [
        ("HEAD", f"/v1/runs/{run['id']}", 405),
        ("GET", f"/v1/runs/{run['id']}/", 200),  # redirected to the run
        ("GET", f"/v1/runs/{run['id']}/events", 200),
        ("DELETE", f"/v1/runs/{run['id']}", 405),
    ]:
        got = api.client.request(method, path, headers=BEARER)
        assert got.status_code == status, (method, path, got.text)


def test_the_poll_and_the_approval_are_the_apps_plain_routes(api: Api) -> None:
    """One router: the app's. The poll and the approval are routes of it that FastAPI
    documents (see ``test_api``) and that answer without its dependency solving."""
    plain = {
        (r.path, m)
        for r in api.client.app.routes  # type: ignore[attr-defined]
        if isinstance(r, api_module.PlainRoute)
        for m in r.methods or ()
    }
    assert plain == {("/v1/runs/{run_id}", "GET"), ("/v1/runs/{run_id}/approval", "POST")}
    create = [
        r
        for r in api.client.app.routes  # type: ignore[attr-defined]
        if isinstance(r, APIRoute) and r.path == "/v1/runs" and "POST" in (r.methods or ())
    ]
    assert len(create) == 1 and not isinstance(create[0], api_module.PlainRoute)
    run = api.create()
    assert api.run(run["id"])["id"] == run["id"]
    unknown = api.client.get("/v1/runs/nope", headers=BEARER)
    assert unknown.status_code == 404 and "'nope'" in unknown.json()["detail"]
    waiting = api.waiting()
    approved = api.approve(waiting["id"], approval_of(waiting))
    assert approved.status_code == 202 and approved.json()["result"] == "recorded"
    assert api.run(waiting["id"])["status"] == "queued"
    again = api.approve(waiting["id"], approval_of(waiting))
    assert again.status_code == 200 and again.json()["result"] == "duplicate"


def test_fastapi_telemetry_is_off_without_a_provider() -> None:
    assert api_module._telemetry(None) == {"tracing": False, "metrics": False, "logs": False}


def test_fastapi_telemetry_is_on_with_a_provider_set_before_the_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    assert api_module._telemetry(None) == {"tracing": True, "metrics": False, "logs": False}


def test_fastapi_telemetry_is_on_with_the_runs_traces() -> None:
    provider = trace.NoOpTracerProvider()
    found = api_module._telemetry(provider)
    assert found is not None and found["tracing"] and found["tracer_provider"] is provider


JSON = BEARER | {"content-type": "application/json"}


def approval_of(view: dict[str, Any], decision: str = "approve") -> dict[str, Any]:
    return {"turn_digest": view["pending"]["turn_digest"], "decision": decision}


def masked(response: Any) -> tuple[int, str | None, Any]:
    """A response with what differs between two runs of the same request (ids, times)
    masked."""
    body = response.json()
    for key in ("id", "run_id", "created_at", "updated_at"):
        if key in body:
            body[key] = "*"
    return response.status_code, response.headers.get("content-type"), body


def test_a_create_is_answered_with_the_runs_view(api: Api) -> None:
    body = {"agent": "w1", "input": "mail 42", "metadata": {"who": "José \u2603"}}
    made = api.client.post("/v1/runs", json=body, headers=BEARER)
    assert made.status_code == 201, made.text
    assert (200, *answer(made)[1:]) == view_of(api, made.json()["id"])
    assert api.run(made.json()["id"])["status"] == "queued"
    keyed = body | {"idempotency_key": "k-1"}
    first = api.client.post("/v1/runs", json=keyed, headers=BEARER)
    assert first.status_code == 201
    again = api.client.post("/v1/runs", json=keyed, headers=BEARER)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert answer(again) == view_of(api, first.json()["id"])
    assert answer(api.client.post("/v1/runs", json=keyed, headers=BEARER)) == answer(again)


UNPROCESSABLE = "Unprocessable request"
UNPARSED = "There was an error parsing the body"


@pytest.mark.parametrize(
    ("content", "headers", "status", "title"),
    [
        (b"", JSON, 422, UNPROCESSABLE),
        (b"{", JSON, 422, UNPROCESSABLE),
        (b"[]", JSON, 422, UNPROCESSABLE),
        (b"null", JSON, 422, UNPROCESSABLE),
        (b'{"agent": "w1"}', JSON, 422, UNPROCESSABLE),
        (b'{"agent": "w1", "input": "x", "extra": 1}', JSON, 422, UNPROCESSABLE),
        (b'{"agent": "w1", "input": 5}', JSON, 422, UNPROCESSABLE),
        (b'{"agent": "", "input": "x"}', JSON, 422, UNPROCESSABLE),
        # a lone surrogate, escaped
        (b'{"agent": "w1", "input": "\\ud800"}', JSON, 422, UNPROCESSABLE),
        # its UTF-8 bytes
        (b'{"agent": "w1", "input": "\xed\xa0\x80"}', JSON, 422, UNPROCESSABLE),
        (b'{"agent": "w1", "input": "\xff"}', JSON, 400, UNPARSED),  # not UTF-8
        (b'{"agent": "w1", "input": NaN}', JSON, 422, UNPROCESSABLE),
        (
            b'{"agent": "w1", "input": "x", "requested_by": "a\\u0000b"}',
            JSON,
            422,
            UNPROCESSABLE,
        ),
        (b'{"agent": "nope", "input": "x"}', JSON, 422, "Unknown agent"),  # the service's
        (b'{"agent": "w1", "input": "x", "idempotency_key": ""}', JSON, 422, UNPROCESSABLE),
        (
            b'{"agent": "w1", "input": "x"}',
            BEARER | {"content-type": "text/plain"},
            422,
            UNPROCESSABLE,
        ),
        # no token
        (b'{"agent": "w1", "input": "x"}', {"content-type": "application/json"}, 401, None),
        (b'{"agent": "w1", "input": "x"}', JSON | {"Authorization": "Bearer wrong"}, 401, None),
        (b"\x00" * 2000, JSON, 422, UNPROCESSABLE),
        (b"[" * 100_000, JSON, 400, UNPARSED),  # deeper than json.loads goes
        (
            b'{"agent": "w1", "input": "x", "metadata": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
            JSON,
            400,
            UNPARSED,
        ),
    ],
)
def test_a_refused_create_is_a_problem_and_stores_nothing(
    api: Api, content: bytes, headers: dict[str, str], status: int, title: str | None
) -> None:
    before = api.service.stats(finished_within=()).runs
    got = api.client.post("/v1/runs", content=content, headers=headers)
    assert got.status_code in (400, 401, 422), got.text
    assert got.status_code == status and got.headers["content-type"] == PROBLEM, got.text
    assert got.json()["title"] == (title or "Unauthorized")
    assert api.service.stats(finished_within=()).runs == before


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json; charset=utf-8", 201),
        ("Application/JSON", 201),
        (None, 422),  # FastAPI takes no body without a JSON content type
    ],
)
def test_a_create_in_any_json_content_type_is_taken(
    api: Api, content_type: str | None, status: int
) -> None:
    headers = BEARER | ({} if content_type is None else {"content-type": content_type})
    content = b'{"agent": "nope", "agent": "w1", "input": "x"}'  # the last key counts
    got = api.client.post("/v1/runs", content=content, headers=headers)
    assert got.status_code == status, got.text
    if status == 201:
        assert got.json()["agent"] == "w1"


def test_an_approval_is_answered_alike_for_every_run(api: Api) -> None:
    one, two = api.waiting(), api.waiting()
    recorded = api.approve(one["id"], approval_of(one))
    assert recorded.status_code == 202, recorded.text
    assert masked(recorded) == masked(api.approve(two["id"], approval_of(two)))
    duplicate = api.approve(one["id"], approval_of(one))
    assert duplicate.status_code == 200 and duplicate.json()["result"] == "duplicate"
    assert masked(duplicate) == masked(api.approve(two["id"], approval_of(two)))


def test_a_refused_approval_is_a_problem_and_decides_nothing(api: Api) -> None:
    waiting, other = api.waiting(), api.waiting()
    good = approval_of(waiting)
    run_id = waiting["id"]
    cases: list[tuple[str, int, str, dict[str, Any]]] = [
        (run_id, 409, "Conflict", {"body": approval_of(other)}),  # another run's turn
        (run_id, 401, "Bad signature", {"body": good, "secret": "whsec_" + "A" * 43}),
        (run_id, 401, "Bad timestamp", {"body": good, "timestamp": 1}),
        (run_id, 401, "Unsigned", {"body": good, "headers": {"content-type": "application/json"}}),
        (run_id, 422, "Malformed decision", {"body": good, "raw": b"{"}),
        (
            run_id,
            422,
            "Malformed decision",
            {"body": good, "raw": b'{"turn_digest": "\\ud800", "decision": "approve"}'},
        ),
        (run_id, 422, "Malformed decision", {"body": good | {"decision": "maybe"}}),
        (
            run_id,
            422,
            "Decision refused",
            {"body": good | {"calls": {"nope": {"decision": "approve"}}}},
        ),
        (run_id, 413, "Body too large", {"body": good, "raw": b"x" * (64 * 1024 + 1)}),
        ("00000000000000000000000000000000", 404, "Not found", {"body": good}),
        ("not-a-run", 404, "Not found", {"body": good}),
        ("%00", 404, "Not found", {"body": good}),
    ]
    for target, status, title, kwargs in cases:
        got = api.approve(target, **kwargs)
        assert got.status_code in (401, 404, 409, 413, 422), (kwargs, got.text)
        assert got.status_code == status and got.headers["content-type"] == PROBLEM, kwargs
        assert got.json()["title"] == title, (kwargs, got.text)
    assert api.run(run_id)["status"] == "waiting_for_approval"
    assert api.run(run_id)["pending"]["calls"][0]["approvals"] == []
