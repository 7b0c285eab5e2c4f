"""The HTTP API (``workers.api:app``, served by ``airlock api``): enqueue and read runs,
and the signed approval webhook. Handlers are thin shells over the service."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError
from standardwebhooks import Webhook
from starlette.exceptions import HTTPException as StarletteHTTPException

from loop import DecisionError
from persistence.domain import Run, RunStatus
from persistence.store import UnknownRunError
from workers.api_metrics import Metrics
from workers.decisions import DecisionBody, TextBody
from workers.guard import MAX_APPROVAL_BODY, MAX_BODY, BodyGate, gate_of, token_matches, verify
from workers.problems import PROBLEMS, ProblemError, SafeJSONResponse, problem_of, problem_response
from workers.service import ConflictError, Service
from workers.settings import Settings
from workers.views import EventPage, RunPage, RunView, event_view, run_view

log = logging.getLogger("airlock")


class CreateRun(TextBody):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    input: str = Field(max_length=MAX_BODY)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    metadata: dict[str, JsonValue] | None = None


def create_app(service: Service, config: Settings, *, check_broker: Callable[[], None]) -> FastAPI:
    app = FastAPI(
        default_response_class=SafeJSONResponse,
        title="Airlock",
        version="0.1.0",
        description="Durable, human-approved LLM agent tool calls.",
    )
    metrics = Metrics(service)
    secrets = [s for s in (config.webhook_secret or "").replace(",", " ").split() if s]
    if not config.api_token:
        log.warning(
            "AIRLOCK_API_TOKEN is not set: the run endpoints accept unauthenticated requests",
            extra={"action": "api.open"},
        )
    _errors(app, metrics)
    app.add_middleware(BodyGate, gate=gate_of(config, secrets, metrics), metrics=metrics)
    _run_routes(app, service, config)
    _approval_route(app, service, [Webhook(s) for s in secrets], metrics)
    _operations(app, service, metrics, check_broker)
    return app


def _errors(app: FastAPI, metrics: Metrics) -> None:
    @app.exception_handler(ProblemError)
    async def _problem(_: Request, exc: ProblemError) -> JSONResponse:
        return problem_response(exc.status, exc.title, exc.detail, type=exc.type)

    for kind in PROBLEMS:

        @app.exception_handler(kind)
        async def _service_error(request: Request, exc: Exception) -> JSONResponse:
            return await _problem(request, problem_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(422, "Unprocessable request", _explain(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem_response(exc.status_code, str(exc.detail), str(exc.detail))


def doc(model: type[BaseModel], *statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI's description of what a route answers: the handlers send their JSON as
    they built it, so FastAPI documents no model of its own."""
    return {status: {"model": model} for status in statuses or (200,)}


def _run_routes(app: FastAPI, service: Service, config: Settings) -> None:
    async def authorised(authorization: Annotated[str | None, Header()] = None) -> None:
        if not config.api_token:
            return
        if not token_matches(authorization, config.api_token):
            raise ProblemError(
                401, "Unauthorized", "send Authorization: Bearer <AIRLOCK_API_TOKEN>"
            )

    auth = [Depends(authorised)]

    def view(run: Run, status: int = 200) -> SafeJSONResponse:
        return SafeJSONResponse(run_view(service, run), status)

    @app.post("/v1/runs", status_code=201, dependencies=auth, responses=doc(RunView, 201, 200))
    def create_run(body: CreateRun) -> SafeJSONResponse:
        run, created = service.start_run(
            body.agent, body.input, idempotency_key=body.idempotency_key, metadata=body.metadata
        )
        return view(run, 201 if created else 200)

    @app.get("/v1/runs", dependencies=auth, responses=doc(RunPage))
    def list_runs(
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        cursor: str | None = None,
    ) -> SafeJSONResponse:
        page = service.list_runs(status=status, agent=agent, limit=limit, cursor=cursor)
        runs: list[JsonValue] = [run_view(service, r) for r in page.runs]
        return SafeJSONResponse({"runs": runs, "next_cursor": page.next_cursor})

    @app.get("/v1/runs/{run_id}", dependencies=auth, responses=doc(RunView))
    def get_run(run_id: str) -> SafeJSONResponse:
        return view(service.get_run(run_id))

    @app.get("/v1/runs/{run_id}/events", dependencies=auth, responses=doc(EventPage))
    def run_events(
        run_id: str,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    ) -> SafeJSONResponse:
        events: list[JsonValue] = [
            event_view(e) for e in service.events(run_id, after=after, limit=limit)
        ]
        return SafeJSONResponse({"events": events})

    @app.post("/v1/runs/{run_id}/cancel", dependencies=auth, responses=doc(RunView))
    def cancel(run_id: str) -> SafeJSONResponse:
        return view(service.cancel(run_id, by="api"))

    @app.post(
        "/v1/runs/{run_id}/retry", status_code=202, dependencies=auth, responses=doc(RunView, 202)
    )
    def retry(run_id: str) -> SafeJSONResponse:
        return view(service.retry(run_id, by="api"), 202)


def _approval_route(
    app: FastAPI, service: Service, verifiers: list[Webhook], metrics: Metrics
) -> None:
    @app.post(
        "/v1/runs/{run_id}/approval",
        status_code=202,
        responses={200: {"description": "a replay, or the same decision again"}},
    )
    async def approval(run_id: str, request: Request) -> SafeJSONResponse:
        raw = await request.body()
        if len(raw) > MAX_APPROVAL_BODY:
            metrics.rejections.labels("too_large").inc()
            raise ProblemError(413, "Body too large", f"the limit is {MAX_APPROVAL_BODY} bytes")
        webhook_id = verify(verifiers, raw, dict(request.headers), metrics)
        body = _parse_decision(raw, metrics)
        try:
            result = await run_in_threadpool(
                service.record_decision, run_id, body, source="webhook", webhook_id=webhook_id
            )
        except (UnknownRunError, ConflictError, DecisionError) as exc:
            metrics.decisions.labels(_refused(exc)).inc()
            raise
        metrics.decisions.labels(result.result).inc()
        answer: dict[str, JsonValue] = {
            "run_id": run_id,
            "result": result.result,
            "decision": result.decision,
            "approver": result.approver,
        }
        return SafeJSONResponse(answer, 200 if result.result == "duplicate" else 202)


def _refused(exc: Exception) -> str:
    """The ``airlock_decisions_total`` label of a decision the service refused."""
    if isinstance(exc, ConflictError):
        return "expired" if exc.expired else "conflict"
    return "not_found" if isinstance(exc, UnknownRunError) else "invalid"


def _operations(
    app: FastAPI, service: Service, metrics: Metrics, check_broker: Callable[[], None]
) -> None:
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        checks: dict[str, str] = {}
        try:
            service.ping()
            checks["database"] = "ok"
        except Exception as exc:
            checks["database"] = f"unreachable: {type(exc).__name__}"
        try:
            check_broker()
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"unreachable: {type(exc).__name__}"
        ok = all(v == "ok" for v in checks.values())
        return JSONResponse({"status": "ok" if ok else "unavailable", **checks}, 200 if ok else 503)

    @app.get("/metrics")
    def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _parse_decision(raw: bytes, metrics: Metrics) -> DecisionBody:
    try:
        return DecisionBody.model_validate_json(raw)
    except ValidationError as exc:
        metrics.rejections.labels("malformed").inc()
        raise ProblemError(
            422, "Malformed decision", _explain(exc.errors(include_url=False))
        ) from exc


def _explain(errors: Any) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in errors
    )


def default_app() -> FastAPI:
    from workers import wiring  # noqa: PLC0415 - the app is built on first access
    from workers.settings import check_secrets, settings  # noqa: PLC0415

    check_secrets(settings())
    return create_app(wiring.service(), settings(), check_broker=wiring.check_broker)


_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    # ``uvicorn workers.api:app`` builds the app on first access, not at import.
    global _app  # noqa: PLW0603
    if name == "app":
        if _app is None:
            _app = default_app()
        return _app
    raise AttributeError(name)
