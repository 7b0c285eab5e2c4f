"""``GET /v1/runs/{id}``, answered by ``HotRoutes`` ahead of FastAPI's routing, answers
exactly as FastAPI's own route does: the same status, type and body, for every kind of
id and caller. And FastAPI's telemetry is decided once, when the app is built."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry import trace
from starlette.routing import Route

from tests.api.conftest import TOKEN, Api, make_api
from workers import api as api_module
from workers.hot_routes import HotRoutes


def fastapi_only(app: FastAPI) -> FastAPI:
    """``app`` without ``HotRoutes`` (its middleware stack is built on first use)."""
    assert app.middleware_stack is None
    app.user_middleware = [m for m in app.user_middleware if m.cls is not HotRoutes]  # type: ignore[comparison-overlap]
    return app


def without_fastapi_route(app: FastAPI) -> FastAPI:
    """``app`` without FastAPI's ``GET /v1/runs/{run_id}``: only ``HotRoutes`` can answer."""
    app.router.routes = [
        r
        for r in app.router.routes
        if not (
            isinstance(r, Route) and r.path == "/v1/runs/{run_id}" and "GET" in (r.methods or ())
        )
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


def test_it_answers_without_fastapi_route(db_url: str) -> None:
    """What the comparisons above compare is HotRoutes' answer, not FastAPI's."""
    hot = make_api(db_url)
    try:
        without_fastapi_route(hot.client.app)  # type: ignore[arg-type]
        run = hot.create()
        assert hot.run(run["id"])["id"] == run["id"]
        unknown = hot.client.get("/v1/runs/nope", headers=BEARER)
        assert unknown.status_code == 404 and "'nope'" in unknown.json()["detail"]
        assert hot.client.head(f"/v1/runs/{run['id']}", headers=BEARER).status_code == 404
    finally:
        hot.service.store.engine.dispose()


def test_fastapi_telemetry_is_off_without_a_provider() -> None:
    assert api_module._telemetry() == {"tracing": False, "metrics": False, "logs": False}


def test_fastapi_telemetry_is_on_with_a_provider_set_before_the_app(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    assert api_module._telemetry() == {"tracing": True, "metrics": False, "logs": False}
