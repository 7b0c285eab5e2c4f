"""The HTTP API (``workers.api:app``, served by ``airlock api``): enqueue and read runs,
and the signed approval webhook. Handlers are thin shells over the service."""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import ConfigDict, Field, JsonValue, ValidationError
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loop import DecisionError, StateError
from persistence.domain import Run, RunStatus
from persistence.store import BadCursorError, UnknownRunError
from workers.decisions import DecisionBody, TextBody
from workers.registry import UnknownAgentError
from workers.service import ConflictError, Service
from workers.settings import Settings
from workers.views import event_view, run_view

log = logging.getLogger("airlock")

MAX_BODY = 1024 * 1024
MAX_APPROVAL_BODY = 64 * 1024


class ProblemError(Exception):
    """An error answered as application/problem+json."""

    def __init__(self, status: int, title: str, detail: str, *, type: str = "about:blank") -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type


APPROVAL_EXPIRED = "/problems/approval-expired"
"""The problem type of a decision that came after the approval's ``expires_at``."""

PROBLEMS: dict[type[Exception], tuple[int, str]] = {
    UnknownRunError: (404, "Not found"),
    ConflictError: (409, "Conflict"),
    StateError: (409, "Unreadable state"),
    DecisionError: (422, "Decision refused"),
    BadCursorError: (422, "Bad cursor"),
    UnknownAgentError: (422, "Unknown agent"),
}
"""How the service's errors are answered: every route lets them through to here."""


def problem_of(exc: Exception) -> ProblemError:
    if isinstance(exc, ConflictError) and exc.expired:
        return ProblemError(409, "Approval expired", str(exc), type=APPROVAL_EXPIRED)
    status, title = next(p for kind, p in PROBLEMS.items() if isinstance(exc, kind))
    return ProblemError(status, title, str(exc))


class SafeJSONResponse(JSONResponse):
    """JSON that a lone surrogate (in a model's or a tool's text) cannot break: it is
    written as its ``\\ud800`` escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, separators=(",", ":")).encode()


def problem_response(
    status: int, title: str, detail: str, *, type: str = "about:blank"
) -> JSONResponse:
    return JSONResponse(
        {"type": type, "title": title, "status": status, "detail": detail},
        status_code=status,
        media_type="application/problem+json",
    )


class CreateRun(TextBody):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    input: str = Field(max_length=MAX_BODY)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    metadata: dict[str, JsonValue] | None = None


class Metrics:
    def __init__(self, service: Service) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "airlock_decisions_total", "Decisions received, by outcome", ["result"],
            registry=self.registry,
        )  # fmt: skip
        self.rejections = Counter(
            "airlock_webhook_rejections_total", "Approval webhooks refused, by reason", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_StoreCollector(service))


class _StoreCollector(Collector):
    """Read from the database, the source of truth, at most once per ``every`` seconds:
    counting runs by status reads the whole table, and however often Prometheus (or
    anyone: the endpoint is open) scrapes, the database counts no more often."""

    def __init__(self, service: Service, every: float = 5.0) -> None:
        self._service = service
        self._every = every
        self._lock = threading.Lock()
        self._read: tuple[float, list[Any]] | None = None

    def collect(self) -> Any:
        with self._lock:
            if self._read is None or time.monotonic() - self._read[0] >= self._every:
                self._read = (time.monotonic(), self._families())
            return list(self._read[1])

    def _families(self) -> list[Any]:
        figures = self._service.stats(finished_within=())
        by_status = GaugeMetricFamily("airlock_runs", "Runs by status", labels=["status"])
        for status, count in figures.runs.items():
            by_status.add_metric([status.value], count)
        return [
            by_status,
            GaugeMetricFamily(
                "airlock_oldest_waiting_approval_seconds",
                "Age of the oldest waiting run",
                value=figures.oldest_waiting_seconds or 0.0,
            ),
            GaugeMetricFamily(
                "airlock_notifications_due",
                "Notifications in the outbox waiting for a delivery attempt",
                value=figures.notifications_due,
            ),
            GaugeMetricFamily(
                "airlock_notifications_given_up",
                "Notifications whose every delivery attempt failed (kept in the outbox)",
                value=figures.notifications_given_up,
            ),
        ]


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
    app.add_middleware(BodyGate, gate=_gate(config, secrets, metrics), metrics=metrics)
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


def token_matches(authorization: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time, as bytes: a header
    may hold any character, and ``compare_digest`` refuses non-ASCII text."""
    if authorization is None:
        return False
    expected = f"Bearer {token}".encode()
    return hmac.compare_digest(authorization.encode("utf-8", "surrogateescape"), expected)


Gate = Callable[[str, Headers], None]
"""Refuses (``ProblemError``) a request by its path and headers, before its body is read."""


def _gate(config: Settings, secrets: list[str], metrics: Metrics) -> Gate:
    def gate(path: str, headers: Headers) -> None:
        if path.endswith("/approval"):
            if secrets:
                _signed_headers(headers, metrics)
        elif (
            path.startswith("/v1/")
            and config.api_token
            and not token_matches(headers.get("authorization"), config.api_token)
        ):
            raise ProblemError(
                401, "Unauthorized", "send Authorization: Bearer <AIRLOCK_API_TOKEN>"
            )

    return gate


class BodyGate:
    """Authenticates what it can from the headers, then reads the body with its limit
    counted as it streams in (chunked or not, whatever Content-Length says): a request
    over the limit gets 413 after at most the limit was read, an unauthenticated one
    401 before any of it."""

    def __init__(self, app: ASGIApp, *, gate: Gate, metrics: Metrics) -> None:
        self._app = app
        self._gate = gate
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self._app(scope, receive, send)
            return
        path: str = scope["path"]
        approval = path.endswith("/approval")
        limit = MAX_APPROVAL_BODY if approval else MAX_BODY
        headers = Headers(scope=scope)
        try:
            self._gate(path, headers)
            body = await _read_within(receive, headers.get("content-length"), limit)
        except ProblemError as exc:
            if exc.status == 413 and approval:
                self._metrics.rejections.labels("too_large").inc()
            await problem_response(exc.status, exc.title, exc.detail)(scope, receive, send)
            return
        if body is None:
            return  # the client went away
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self._app(scope, replay, send)


async def _read_within(receive: Receive, length: str | None, limit: int) -> bytes | None:
    too_large = ProblemError(413, "Body too large", f"the limit is {limit} bytes")
    if length is not None and (not length.isdigit() or len(length) > 12 or int(length) > limit):
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _run_routes(app: FastAPI, service: Service, config: Settings) -> None:
    def authorised(authorization: Annotated[str | None, Header()] = None) -> None:
        if not config.api_token:
            return
        if not token_matches(authorization, config.api_token):
            raise ProblemError(
                401, "Unauthorized", "send Authorization: Bearer <AIRLOCK_API_TOKEN>"
            )

    auth = [Depends(authorised)]

    def view(run: Run) -> dict[str, JsonValue]:
        return run_view(service, run)

    @app.post("/v1/runs", status_code=201, dependencies=auth)
    def create_run(body: CreateRun, response: Response) -> dict[str, JsonValue]:
        run, created = service.start_run(
            body.agent, body.input, idempotency_key=body.idempotency_key, metadata=body.metadata
        )
        if not created:
            response.status_code = 200
        return view(run)

    @app.get("/v1/runs", dependencies=auth)
    def list_runs(
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: Annotated[int, Query(ge=1, le=200)] = 50,
        cursor: str | None = None,
    ) -> dict[str, JsonValue]:
        page = service.list_runs(status=status, agent=agent, limit=limit, cursor=cursor)
        return {"runs": [view(r) for r in page.runs], "next_cursor": page.next_cursor}

    @app.get("/v1/runs/{run_id}", dependencies=auth)
    def get_run(run_id: str) -> dict[str, JsonValue]:
        return view(service.get_run(run_id))

    @app.get("/v1/runs/{run_id}/events", dependencies=auth)
    def run_events(
        run_id: str,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
    ) -> dict[str, JsonValue]:
        events = service.events(run_id, after=after, limit=limit)
        return {"events": [event_view(e) for e in events]}

    @app.post("/v1/runs/{run_id}/cancel", dependencies=auth)
    def cancel(run_id: str) -> dict[str, JsonValue]:
        return view(service.cancel(run_id, by="api"))

    @app.post("/v1/runs/{run_id}/retry", status_code=202, dependencies=auth)
    def retry(run_id: str) -> dict[str, JsonValue]:
        return view(service.retry(run_id, by="api"))


def _approval_route(
    app: FastAPI, service: Service, verifiers: list[Webhook], metrics: Metrics
) -> None:
    @app.post(
        "/v1/runs/{run_id}/approval",
        status_code=202,
        responses={200: {"description": "a replay, or the same decision again"}},
    )
    async def approval(run_id: str, request: Request, response: Response) -> dict[str, JsonValue]:
        raw = await request.body()
        if len(raw) > MAX_APPROVAL_BODY:
            metrics.rejections.labels("too_large").inc()
            raise ProblemError(413, "Body too large", f"the limit is {MAX_APPROVAL_BODY} bytes")
        webhook_id = _verify(verifiers, raw, dict(request.headers), metrics)
        body = _parse_decision(raw, metrics)
        try:
            result = await run_in_threadpool(
                service.record_decision, run_id, body, source="webhook", webhook_id=webhook_id
            )
        except (UnknownRunError, ConflictError, DecisionError) as exc:
            metrics.decisions.labels(_refused(exc)).inc()
            raise
        metrics.decisions.labels(result.result).inc()
        if result.result == "duplicate":
            response.status_code = 200
        return {
            "run_id": run_id,
            "result": result.result,
            "decision": result.decision,
            "approver": result.approver,
        }


def _refused(exc: Exception) -> str:
    """The ``airlock_decisions_total`` label of a decision the service refused."""
    if isinstance(exc, ConflictError):
        return "expired" if exc.expired else "conflict"
    return "not_found" if isinstance(exc, UnknownRunError) else "invalid"


def _operations(
    app: FastAPI, service: Service, metrics: Metrics, check_broker: Callable[[], None]
) -> None:
    @app.get("/healthz")
    def healthz() -> dict[str, str]:
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


def _signed_headers(headers: Mapping[str, str], metrics: Metrics) -> str:
    """The webhook's id, once its headers are there and its timestamp is within the
    tolerance: checked before its body is read."""
    webhook_id = headers.get("webhook-id")
    if not (webhook_id and headers.get("webhook-timestamp") and headers.get("webhook-signature")):
        metrics.rejections.labels("missing_headers").inc()
        raise ProblemError(
            401, "Unsigned", "webhook-id, webhook-timestamp and webhook-signature are required"
        )
    timestamp = headers["webhook-timestamp"]
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12) or (
        abs(time.time() - int(timestamp)) > 300
    ):
        metrics.rejections.labels("timestamp").inc()
        raise ProblemError(401, "Bad timestamp", "webhook-timestamp is not within 5 minutes of now")
    return webhook_id


def _verify(verifiers: list[Webhook], raw: bytes, headers: dict[str, str], metrics: Metrics) -> str:
    if not verifiers:
        metrics.rejections.labels("not_configured").inc()
        raise ProblemError(503, "Approvals disabled", "AIRLOCK_WEBHOOK_SECRET is not set")
    webhook_id = _signed_headers(headers, metrics)
    for verifier in verifiers:  # several secrets while one is rotated out
        try:
            verifier.verify(raw, headers, json_parse=False)
            return webhook_id
        except (WebhookVerificationError, ValueError, UnicodeDecodeError):
            continue
    metrics.rejections.labels("signature").inc()
    raise ProblemError(401, "Bad signature", "no webhook-signature matches the configured secret")


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
