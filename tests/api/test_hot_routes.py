"""``GET /v1/runs/{id}``, ``POST /v1/runs`` and ``POST /v1/runs/{id}/approval``,
answered by ``HotRoutes`` ahead of FastAPI's routing, answer exactly as FastAPI's own
routes do: the same status, type and body, for every kind of id, body and caller. And
FastAPI's telemetry is decided once, when the app is built."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry import trace
from starlette.routing import Route

from tests.api.conftest import Api, make_api
from workers.http import api as api_module
from workers.http.hot_routes import HotRoutes
from workers.testing import TOKEN


def fastapi_only(app: FastAPI) -> FastAPI:
    """``app`` without ``HotRoutes`` (its middleware stack is built on first use)."""
    assert app.middleware_stack is None
    app.user_middleware = [m for m in app.user_middleware if m.cls is not HotRoutes]  # type: ignore[comparison-overlap]
    return app


HOT = {
    ("/v1/runs/{run_id}", "GET"),
    ("/v1/runs", "POST"),
    ("/v1/runs/{run_id}/approval", "POST"),
}


def without_fastapi_routes(app: FastAPI) -> FastAPI:
    """``app`` without FastAPI's routes for what ``HotRoutes`` takes: only it can
    answer them."""
    app.router.routes = [
        r
        for r in app.router.routes
        if not (isinstance(r, Route) and any((r.path, m) in HOT for m in r.methods or ()))
    ]
    return app


@pytest.fixture
def pair(db_url: str) -> Iterator[tuple[Api, TestClient]]:
    """The app as served and, beside it on the same database, one without
    ``HotRoutes``."""
    hot = make_api(db_url)
    plain = make_api(db_url)
    fastapi_only(plain.client.app)  # type: ignore[arg-type]
    yield hot, plain.client
    hot.service.store.engine.dispose()
    plain.service.store.engine.dispose()


def answer(response: Any) -> tuple[int, str | None, bytes]:
    return response.status_code, response.headers.get("content-type"), response.content


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_the_hot_route_answers_every_run_as_fastapi_does(pair: tuple[Api, TestClient]) -> None:
    hot, plain = pair
    queued = hot.create(metadata={"who": "José \u2603"})
    waiting = hot.waiting()
    done = hot.waiting()
    decision = {"turn_digest": done["pending"]["turn_digest"], "decision": "approve"}
    assert hot.approve(done["id"], decision).status_code == 202
    hot.segment(done["id"])
    for run_id in (queued["id"], waiting["id"], done["id"]):
        path = f"/v1/runs/{run_id}"
        got = hot.client.get(path, headers=BEARER)
        assert got.status_code == 200, got.text
        assert answer(got) == answer(plain.get(path, headers=BEARER))
    assert hot.client.get(f"/v1/runs/{waiting['id']}", headers=BEARER).json()["pending"]
    assert hot.client.get(f"/v1/runs/{done['id']}", headers=BEARER).json()["status"] == (
        "completed"
    )


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/runs/00000000000000000000000000000000", BEARER),  # no such run
        ("/v1/runs/not-a-run-id", BEARER),
        ("/v1/runs/%00", BEARER),
        ("/v1/runs/%ED%A0%80", BEARER),  # a lone surrogate's UTF-8 bytes
        ("/v1/runs/" + "a" * 5000, BEARER),
        ("/v1/runs/x?after=1&limit=-5", BEARER),
        ("/v1/runs/00000000000000000000000000000000", {}),  # no token
        ("/v1/runs/00000000000000000000000000000000", {"Authorization": "Bearer wrong"}),
        ("/v1/runs/", BEARER),
        ("/v1/runs", BEARER),
    ],
)
def test_refusals_are_the_same(
    pair: tuple[Api, TestClient], path: str, headers: dict[str, str]
) -> None:
    hot, plain = pair
    got = hot.client.get(path, headers=headers)
    assert got.status_code in (200, 401, 404), got.text
    assert answer(got) == answer(plain.get(path, headers=headers))


def test_what_it_does_not_take_goes_on_to_fastapi(pair: tuple[Api, TestClient]) -> None:
    hot, plain = pair
    run = hot.create()
    for method, path in [
        ("HEAD", f"/v1/runs/{run['id']}"),
        ("GET", f"/v1/runs/{run['id']}/"),
        ("GET", f"/v1/runs/{run['id']}/events"),
        ("DELETE", f"/v1/runs/{run['id']}"),
    ]:
        got = hot.client.request(method, path, headers=BEARER)
        want = plain.request(method, path, headers=BEARER)
        assert got.status_code == want.status_code, (method, path, got.text)


def test_it_answers_without_fastapi_routes(db_url: str) -> None:
    """What the comparisons compare is HotRoutes' answer, not FastAPI's."""
    hot = make_api(db_url)
    try:
        without_fastapi_routes(hot.client.app)  # type: ignore[arg-type]
        run = hot.create()
        assert hot.run(run["id"])["id"] == run["id"]
        unknown = hot.client.get("/v1/runs/nope", headers=BEARER)
        assert unknown.status_code == 404 and "'nope'" in unknown.json()["detail"]
        assert hot.client.head(f"/v1/runs/{run['id']}", headers=BEARER).status_code == 404
        waiting = hot.waiting()
        approved = hot.approve(waiting["id"], approval_of(waiting))
        assert approved.status_code == 202 and approved.json()["result"] == "recorded"
        assert hot.run(waiting["id"])["status"] == "queued"
        again = hot.approve(waiting["id"], approval_of(waiting))
        assert again.status_code == 200 and again.json()["result"] == "duplicate"
        # a body HotRoutes leaves to FastAPI finds no route now
        refused = hot.client.post("/v1/runs", content=b"{", headers=JSON)
        assert refused.status_code == 405
    finally:
        hot.service.store.engine.dispose()


def test_fastapi_telemetry_is_off_without_a_provider() -> None:
    assert api_module._telemetry() == {"tracing": False, "metrics": False, "logs": False}


def test_fastapi_telemetry_is_on_with_a_provider_set_before_the_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    assert api_module._telemetry() == {"tracing": True, "metrics": False, "logs": False}


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


def test_a_create_is_answered_as_fastapi_answers_it(pair: tuple[Api, TestClient]) -> None:
    hot, plain = pair
    body = {"agent": "w1", "input": "mail 42", "metadata": {"who": "José \u2603"}}
    made = hot.client.post("/v1/runs", json=body, headers=BEARER)
    assert made.status_code == 201, made.text
    assert masked(made) == masked(plain.post("/v1/runs", json=body, headers=BEARER))
    assert hot.run(made.json()["id"])["status"] == "queued"
    keyed = body | {"idempotency_key": "k-1"}
    first = hot.client.post("/v1/runs", json=keyed, headers=BEARER)
    assert first.status_code == 201
    again = hot.client.post("/v1/runs", json=keyed, headers=BEARER)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert answer(plain.post("/v1/runs", json=keyed, headers=BEARER)) == answer(again)


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (b"", JSON),
        (b"{", JSON),
        (b"[]", JSON),
        (b"null", JSON),
        (b'{"agent": "w1"}', JSON),
        (b'{"agent": "w1", "input": "x", "extra": 1}', JSON),
        (b'{"agent": "w1", "input": 5}', JSON),
        (b'{"agent": "", "input": "x"}', JSON),
        (b'{"agent": "w1", "input": "\\ud800"}', JSON),  # a lone surrogate, escaped
        (b'{"agent": "w1", "input": "\xed\xa0\x80"}', JSON),  # its UTF-8 bytes
        (b'{"agent": "w1", "input": "\xff"}', JSON),  # not UTF-8
        (b'{"agent": "w1", "input": NaN}', JSON),
        (b'{"agent": "w1", "input": "x", "requested_by": "a\\u0000b"}', JSON),
        (b'{"agent": "nope", "input": "x"}', JSON),  # the service's refusal
        (b'{"agent": "w1", "input": "x", "idempotency_key": ""}', JSON),
        (b'{"agent": "w1", "input": "x"}', BEARER | {"content-type": "text/plain"}),
        (b'{"agent": "w1", "input": "x"}', {"content-type": "application/json"}),  # no token
        (b'{"agent": "w1", "input": "x"}', JSON | {"Authorization": "Bearer wrong"}),
        (b"\x00" * 2000, JSON),
        (b"[" * 100_000, JSON),  # deeper than json.loads goes
        (
            b'{"agent": "w1", "input": "x", "metadata": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
            JSON,
        ),
    ],
)
def test_a_refused_create_is_refused_as_fastapi_refuses_it(
    pair: tuple[Api, TestClient], content: bytes, headers: dict[str, str]
) -> None:
    hot, plain = pair
    before = hot.service.stats(finished_within=()).runs
    got = hot.client.post("/v1/runs", content=content, headers=headers)
    assert got.status_code in (400, 401, 422), got.text
    assert answer(got) == answer(plain.post("/v1/runs", content=content, headers=headers))
    assert hot.service.stats(finished_within=()).runs == before


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json; charset=utf-8", 201),
        ("Application/JSON", 201),
        (None, 422),  # FastAPI takes no body without a JSON content type
    ],
)
def test_a_create_in_any_json_content_type_is_taken(
    pair: tuple[Api, TestClient], content_type: str | None, status: int
) -> None:
    hot, plain = pair
    headers = BEARER | ({} if content_type is None else {"content-type": content_type})
    content = b'{"agent": "nope", "agent": "w1", "input": "x"}'  # the last key counts
    got = hot.client.post("/v1/runs", content=content, headers=headers)
    assert got.status_code == status, got.text
    assert masked(got) == masked(plain.post("/v1/runs", content=content, headers=headers))


def test_an_approval_is_answered_as_fastapi_answers_it(pair: tuple[Api, TestClient]) -> None:
    hot, plain = pair
    one, two = hot.waiting(), hot.waiting()
    via_plain = Api(plain, hot.service)
    recorded = hot.approve(one["id"], approval_of(one))
    assert recorded.status_code == 202, recorded.text
    assert masked(recorded) == masked(via_plain.approve(two["id"], approval_of(two)))
    duplicate = hot.approve(one["id"], approval_of(one))
    assert duplicate.status_code == 200 and duplicate.json()["result"] == "duplicate"
    assert masked(duplicate) == masked(via_plain.approve(two["id"], approval_of(two)))


def test_a_refused_approval_is_refused_as_fastapi_refuses_it(
    pair: tuple[Api, TestClient],
) -> None:
    hot, plain = pair
    waiting, other = hot.waiting(), hot.waiting()
    via_plain = Api(plain, hot.service)
    good = approval_of(waiting)
    run_id = waiting["id"]
    cases: list[tuple[str, dict[str, Any]]] = [
        (run_id, {"body": approval_of(other)}),  # another run's turn
        (run_id, {"body": good, "secret": "whsec_" + "A" * 43}),  # a bad signature
        (run_id, {"body": good, "timestamp": 1}),
        (run_id, {"body": good, "headers": {"content-type": "application/json"}}),
        (run_id, {"body": good, "raw": b"{"}),
        (run_id, {"body": good, "raw": b'{"turn_digest": "\\ud800", "decision": "approve"}'}),
        (run_id, {"body": good | {"decision": "maybe"}}),
        (run_id, {"body": good | {"calls": {"nope": {"decision": "approve"}}}}),
        (run_id, {"body": good, "raw": b"x" * (64 * 1024 + 1)}),
        ("00000000000000000000000000000000", {"body": good}),
        ("not-a-run", {"body": good}),
        ("%00", {"body": good}),
    ]
    for target, kwargs in cases:
        got = hot.approve(target, **kwargs)
        assert got.status_code in (401, 404, 409, 413, 422), (kwargs, got.text)
        want = via_plain.approve(target, **kwargs)
        assert answer(got) == answer(want), kwargs
    assert hot.run(run_id)["status"] == "waiting_for_approval"
    assert hot.run(run_id)["pending"]["calls"][0]["approvals"] == []
