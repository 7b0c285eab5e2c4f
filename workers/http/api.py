"""The HTTP API (``airlock.workers.api:app``, served by ``airlock api``): enqueue and read runs,
and the signed approval webhook. Handlers are thin shells over the service.

One router, FastAPI's. What every run does many times, its polls (``GET
/v1/runs/{id}``) and its approval, is answered by plain routes (``PlainRoute``):
matched, documented and refused as FastAPI's routes are, called without FastAPI's
dependency solving and thread hop."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Annotated, Any
from weakref import WeakKeyDictionary

from anyio import CapacityLimiter, to_thread
from fastapi import FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, JsonValue
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from airlock.persistence.domain import Run, RunStatus
from airlock.workers.http import grants, inbox, mcp_gateway, streams
from airlock.workers.http.auth import Authenticator
from airlock.workers.http.guard import BodyGate, Gate
from airlock.workers.http.handlers import CreateRun, Handlers, caller_of, explain
from airlock.workers.http.hub import Hubs
from airlock.workers.http.metrics import Metrics
from airlock.workers.http.problems import REFUSALS, SafeJSONResponse, problem_response, refusal
from airlock.workers.http.schema_gate import SchemaGate, SchemaWatch
from airlock.workers.http.streams import MAX_SEQ, StreamSlots
from airlock.workers.service import Service
from airlock.workers.service.principals import Principal
from airlock.workers.service.settings import Settings
from airlock.workers.service.views import (
    EventPage,
    RunPage,
    RunView,
    database_view,
    event_view,
    run_view,
    sweeper_view,
)

log = logging.getLogger("airlock")


def create_app(service: Service, config: Settings, *, check_broker: Callable[[], None]) -> FastAPI:
    telemetry = _telemetry(service.traces.provider)
    watch = SchemaWatch(service.schema_status)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(watch.status)  # a schema that is not ready is logged at start
        async with mcp_gateway.running(app):
            yield

    app = FastAPI(
        **({} if telemetry is None else {"telemetry": telemetry}),  # type: ignore[arg-type]
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
        title="Airlock",
        version="0.1.0",
        description="Durable, human-approved LLM agent tool calls.",
    )
    metrics = Metrics(service)
    auth = Authenticator(config, metrics)
    if auth.open:
        log.warning(
            "AIRLOCK_API_TOKEN is not set: the run endpoints accept unauthenticated requests",
            extra={"action": "api.open"},
        )
    _errors(app, metrics)
    handlers = Handlers(service, auth, metrics)
    # inside the BodyGate: a caller is authenticated, and its body read within its limit,
    # before it learns of the schema
    app.add_middleware(SchemaGate, watch=watch)
    app.add_middleware(BodyGate, gate=gate_of(auth), metrics=metrics)
    _run_routes(app, handlers)
    grants.mount(app, handlers)
    _plain_routes(app, handlers)
    app.state.hubs = hubs = Hubs(service)
    hubs.measured(metrics.registry)
    app.state.stream_slots = slots = StreamSlots()
    streams.mount(app, hubs, slots)
    _operations(app, service, metrics, check_broker, watch)
    inbox.mount(app, service, auth, config, hubs=hubs, slots=slots)
    if config.mcp_servers is not None:
        mcp_gateway.serve(app, service, config.mcp_wait, auth=auth, handlers=handlers, hubs=hubs)
    _document_bearer(app)
    return app


def _telemetry(tracer_provider: Any) -> dict[str, Any] | None:
    """FastAPI's OpenTelemetry spans and metrics: its request spans on with the runs'
    traces (``tracer_provider``, the run's create span below the request's), or when a
    global provider is set when the app is built (as ``opentelemetry-instrument airlock
    api`` does); its metrics when a global meter provider is; its logs never (no public
    API tells whether a logger provider was set). Off otherwise: left to FastAPI, every
    request asks OpenTelemetry whether a provider was set since, which py-spy showed as
    the largest single cost of a poll's ``GET`` (a FastAPI without native telemetry:
    None)."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return None
    from opentelemetry import metrics, trace  # noqa: PLC0415 - FastAPI's own dependency

    if tracer_provider is not None:
        return {"tracing": True, "tracer_provider": tracer_provider, "logs": False}
    providers = (trace.get_tracer_provider(), metrics.get_meter_provider())
    tracing, measuring = (not type(p).__name__.lstrip("_").startswith("Proxy") for p in providers)
    return {"tracing": tracing, "metrics": measuring, "logs": False}


def _errors(app: FastAPI, metrics: Metrics) -> None:
    for kind in REFUSALS:

        @app.exception_handler(kind)
        async def _refused(_: Request, exc: Exception) -> JSONResponse:
            return refusal(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(422, "Unprocessable request", explain(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem_response(exc.status_code, str(exc.detail), str(exc.detail))


VERIFIERS = 8
"""Threads that verify OIDC tokens at once (beside FastAPI's own)."""


def gate_of(auth: Authenticator) -> Gate:
    """Who calls ``/v1/``, before a body is read; noted in the scope's ``state`` as
    ``principal`` (None: the API token's holder, or anyone on an open API)."""

    # made on each event loop at its first use (one under uvicorn; a test client may
    # run one per request)
    verifiers: WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityLimiter] = WeakKeyDictionary()

    async def gate(scope: Scope, headers: Headers) -> None:
        path: str = scope["path"]
        if not path.startswith("/v1/"):
            return
        approval = path.endswith("/approval") and scope["method"] == "POST"
        if approval:
            check: Callable[[], tuple[Principal | None, float | None]] = lambda: (  # noqa: E731
                auth.approver(headers),
                None,
            )
        else:
            check = lambda: auth.caller_until(headers.get("authorization"))  # noqa: E731
        # verifying a token may wait on the issuer's keys: not on the event loop, and
        # in threads of its own, so that tokens (made up ones too) waiting on a fetch
        # never hold the threads FastAPI's routes run on
        if auth.verifies(headers, approval=approval):
            loop = asyncio.get_running_loop()
            limiter = verifiers.get(loop) or verifiers.setdefault(loop, CapacityLimiter(VERIFIERS))
            principal, until = await to_thread.run_sync(check, limiter=limiter)
        else:
            principal, until = check()
        # ``until``: when the caller's token is no longer accepted (its streams end then)
        scope.setdefault("state", {}).update(principal=principal, until=until)

    return gate


def _document_bearer(app: FastAPI) -> None:
    """OpenAPI says the run endpoints take a bearer token. The gate checks it
    (``gate_of``), so no route carries a dependency for it on every request."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        first = app.openapi_schema is None
        schema = build()
        if first:
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes["bearer"] = {
                "type": "http",
                "scheme": "bearer",
                "description": "AIRLOCK_API_TOKEN, or a token of the configured OIDC issuer",
            }
            for path, item in schema["paths"].items():
                if path.startswith(("/v1/runs", "/v1/approvals")) and not path.endswith(
                    "/approval"
                ):
                    for operation in item.values():
                        operation["security"] = [{"bearer": []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def doc(model: type[BaseModel], *statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI's description of what a route answers: the handlers send their JSON as
    they built it, so FastAPI documents no model of its own."""
    return {status: {"model": model} for status in statuses or (200,)}


def _run_routes(app: FastAPI, handlers: Handlers) -> None:
    service = handlers.service

    def view(run: Run, status: int = 200) -> SafeJSONResponse:
        return SafeJSONResponse(run_view(service, run), status)

    @app.post("/v1/runs", status_code=201, responses=doc(RunView, 201, 200))
    async def create_run(body: CreateRun, request: Request) -> SafeJSONResponse:
        traceparent = request.headers.get("traceparent")
        return await handlers.create_run(body, caller_of(request.scope), traceparent)

    @app.get("/v1/runs", responses=doc(RunPage))
    def list_runs(
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        cursor: str | None = None,
    ) -> SafeJSONResponse:
        page = service.list_runs(status=status, agent=agent, limit=limit, cursor=cursor)
        runs: list[JsonValue] = [run_view(service, r) for r in page.runs]
        return SafeJSONResponse({"runs": runs, "next_cursor": page.next_cursor})

    @app.get("/v1/runs/{run_id}/events", responses=doc(EventPage))
    def run_events(
        run_id: str,
        after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    ) -> SafeJSONResponse:
        events: list[JsonValue] = [
            event_view(e) for e in service.events(run_id, after=after, limit=limit)
        ]
        return SafeJSONResponse({"events": events})

    @app.post("/v1/runs/{run_id}/cancel", responses=doc(RunView))
    def cancel(run_id: str, request: Request) -> SafeJSONResponse:
        by = handlers.principal_of(caller_of(request.scope))
        return view(service.cancel(run_id, by=by))

    @app.post("/v1/runs/{run_id}/retry", status_code=202, responses=doc(RunView, 202))
    def retry(run_id: str, request: Request) -> SafeJSONResponse:
        by = handlers.principal_of(caller_of(request.scope))
        return view(service.retry(run_id, by=by), 202)


class PlainRoute(APIRoute):
    """A route of the app's router that FastAPI matches and documents as any other (its
    path, methods, ``responses``, and the parameters of ``documented``, which is never
    called), answered by ``answer(request)`` as a plain Starlette endpoint: no
    dependency solving or validation, and no thread of anyio's (``answer`` calls the
    service in ``Handlers.in_thread``). The app's middlewares and exception handlers
    answer it as they answer every route; FastAPI's dependencies, and their overrides,
    do not run on it."""

    def __init__(
        self,
        path: str,
        documented: Callable[..., Any],
        *,
        answer: Callable[[Request], Coroutine[Any, Any, Response]],
        **route: Any,
    ) -> None:
        self.answer = answer
        super().__init__(path, documented, **route)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.answer


def _plain_routes(app: FastAPI, handlers: Handlers) -> None:
    """``GET /v1/runs/{run_id}`` (a run's polls) and ``POST /v1/runs/{run_id}/approval``,
    as ``PlainRoute``s."""

    # what OpenAPI says both take (never called; a docstring would describe them)
    def run_id_only(run_id: str) -> None:
        return None

    async def get_run(request: Request) -> Response:
        return await handlers.get_run(request.path_params["run_id"])

    async def approval(request: Request) -> Response:
        raw = await request.body()
        principal = caller_of(request.scope)
        return await handlers.approve(
            request.path_params["run_id"], raw, request.headers, principal
        )

    plain = [
        PlainRoute(
            "/v1/runs/{run_id}",
            run_id_only,
            answer=get_run,
            name="get_run",
            methods=["GET"],
            responses=doc(RunView),
        ),
        PlainRoute(
            "/v1/runs/{run_id}/approval",
            run_id_only,
            answer=approval,
            name="approval",
            methods=["POST"],
            status_code=202,
            responses={
                200: {
                    "description": "a replay, the same decision again, or an approval "
                    "recorded toward a quorum that is not reached yet (result: partial)"
                }
            },
        ),
    ]
    # first in the router, which tries its routes in turn: no other route matches these
    # paths with these methods, so none is passed over, and a poll tries no other
    app.router.routes[0:0] = plain


def _operations(
    app: FastAPI,
    service: Service,
    metrics: Metrics,
    check_broker: Callable[[], None],
    watch: SchemaWatch,
) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        # read-only: on SQLite a file that is not there is said to be absent, not made
        checks = database_view(watch.recheck())
        try:
            check_broker()
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"unreachable: {type(exc).__name__}"
        ok = all(v == "ok" for v in checks.values())
        body: dict[str, JsonValue] = {"status": "ok" if ok else "unavailable", **checks}
        # seen, never a reason to refuse: this API serves without a beat (a fresh
        # deployment starts it later); `airlock health beat` is the beat's own check
        body["sweeper"] = (
            _sweeper(service)
            if checks["database"] == "ok"
            else {"state": "unknown: the database cannot be read"}
        )
        return JSONResponse(body, 200 if ok else 503)

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _sweeper(service: Service) -> JsonValue:
    try:
        return sweeper_view(service.sweeper())
    except Exception as exc:
        return {"state": f"unknown: {type(exc).__name__}"}


def default_app() -> FastAPI:
    from airlock.workers.service.settings import check_secrets, settings  # noqa: PLC0415
    from airlock.workers.tasks import wiring  # noqa: PLC0415 - the app is built on first access

    check_secrets(settings())
    return create_app(wiring.service(), settings(), check_broker=wiring.check_broker)


_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    # ``uvicorn airlock.workers.api:app`` builds the app on first access, not at import.
    global _app  # noqa: PLW0603
    if name == "app":
        if _app is None:
            _app = default_app()
        return _app
    raise AttributeError(name)
