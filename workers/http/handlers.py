"""What ``POST /v1/runs``, ``GET /v1/runs/{id}`` and ``POST /v1/runs/{id}/approval``
do, once a request is read, for the routes of ``airlock.workers.http.api``, and the threads they
call the service in. Their errors are the service's, or ``ProblemError``: the app
answers them with its one table (``airlock.workers.http.problems``)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ConfigDict, Field, JsonValue, ValidationError, field_validator
from starlette.types import Scope

from airlock.workers.http.auth import Authenticator
from airlock.workers.http.guard import MAX_APPROVAL_BODY, MAX_BODY
from airlock.workers.http.metrics import Metrics
from airlock.workers.http.problems import ProblemError, SafeJSONResponse
from airlock.workers.service import Service
from airlock.workers.service.decisions import DecisionBody, TextBody
from airlock.workers.service.principals import ForbiddenError, Principal, check_name
from airlock.workers.service.views import run_view

T = TypeVar("T")

THREADS = 40
"""Threads the run routes call the service in (as many as FastAPI's own pool)."""


class CreateRun(TextBody):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    input: str = Field(max_length=MAX_BODY)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=255)
    metadata: dict[str, JsonValue] | None = None
    requested_by: str | None = Field(default=None, min_length=1, max_length=200)
    """Who asked for the run, named by a trusted client (the API token's holder); a
    token's principal is the requester itself."""

    @field_validator("requested_by")
    @classmethod
    def _requester(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "requested_by")


TOKEN_HOLDER = Principal.trusted("api-token")
"""The API token's holder: a trusted backend, the operator."""
ANYONE = Principal.trusted("anonymous")
"""Anyone, on an open API (no API token, no issuer)."""


@dataclass(frozen=True)
class Handlers:
    service: Service
    auth: Authenticator
    metrics: Metrics
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(THREADS, thread_name_prefix="airlock-api")
    )

    async def in_thread(self, work: Callable[[], T]) -> T:
        """``work`` (the database, the broker: blocking) off the event loop, in the
        caller's context. A plain executor's hop costs less CPU than anyio's, which
        FastAPI uses for a sync route (its capacity limiter and cancel scopes)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.executor, context.run, work)

    def principal_of(self, caller: Principal | None) -> Principal:
        """Who calls a run endpoint (``caller_of``): its token's principal, or the API
        token's holder (anyone, on an open API), trusted as the operator is."""
        if caller is not None:
            return caller
        return ANYONE if self.auth.open else TOKEN_HOLDER

    def scope_of(self, caller: Principal | None) -> str:
        """The caller an idempotency key belongs to: a subject of its issuer, the API
        token's holder, or anyone on an open API."""
        if caller is not None:  # a token's subject: the run's requester is proven
            return caller.key
        return "anonymous" if self.auth.open else "token"

    async def create_run(
        self, body: CreateRun, caller: Principal | None, traceparent: str | None = None
    ) -> SafeJSONResponse:
        """A new run (201), or the one the caller's idempotency key already made for the
        same request (200; 409 for another request). ``traceparent``: the caller's
        trace, which the run's continues when traces are on."""
        return await self.in_thread(lambda: self._create_run(body, caller, traceparent))

    def _create_run(
        self, body: CreateRun, caller: Principal | None, traceparent: str | None
    ) -> SafeJSONResponse:
        requested_by = body.requested_by
        if caller is not None:
            if requested_by not in (None, caller.id):
                raise ForbiddenError(
                    f"{caller.id} may not name another requester: only a trusted client "
                    "(the API token's holder) may pass requested_by"
                )
            requested_by = caller.id
        run, created = self.service.start_run(
            body.agent,
            body.input,
            idempotency_key=body.idempotency_key,
            metadata=body.metadata,
            requested_by=requested_by,
            caller=self.scope_of(caller),
            traceparent=traceparent,
        )
        return SafeJSONResponse(run_view(self.service, run), 201 if created else 200)

    async def get_run(self, run_id: str) -> SafeJSONResponse:
        """The run's view (404: no such run)."""
        service = self.service
        return SafeJSONResponse(
            await self.in_thread(lambda: run_view(service, service.get_run(run_id)))
        )

    async def approve(
        self,
        run_id: str,
        raw: bytes,
        headers: Mapping[str, str],
        principal: Principal | None,
    ) -> SafeJSONResponse:
        """A decision on the turn ``run_id`` waits on: from a token's principal, or (no
        principal) a signed webhook whose client vouches for the approver."""
        metrics = self.metrics
        if len(raw) > MAX_APPROVAL_BODY:
            metrics.rejections.labels("too_large").inc()
            raise ProblemError(413, "Body too large", f"the limit is {MAX_APPROVAL_BODY} bytes")
        webhook_id: str | None = None
        if principal is None:
            client, webhook_id = self.auth.client(raw, dict(headers))
            body = parse_decision(raw, metrics)
            principal = Principal.of_client(client.name, client.roles, body.approver)
        else:
            body = parse_decision(raw, metrics)
        decided, service = principal, self.service
        result = await self.in_thread(
            lambda: service.record_decision(run_id, body, decided, webhook_id=webhook_id)
        )
        answer: dict[str, JsonValue] = {
            "run_id": run_id,
            "result": result.result,
            "decision": result.decision,
            "approver": result.approver,
            "approved_by": list(result.approved_by),
            "quorum": result.quorum,
        }
        if body.grant is not None:  # what stands of the grants asked for
            answer["grants"] = list(result.grants)
        return SafeJSONResponse(answer, 202 if result.result == "recorded" else 200)


def caller_of(scope: Scope) -> Principal | None:
    """The caller the gate verified (``airlock.workers.http.api.gate_of``) and noted in the scope:
    None for the API token's holder, or anyone on an open API."""
    found: Principal | None = scope.get("state", {}).get("principal")
    return found


def parse_decision(raw: bytes, metrics: Metrics) -> DecisionBody:
    try:
        return DecisionBody.model_validate_json(raw)
    except ValidationError as exc:
        metrics.rejections.labels("malformed").inc()
        raise ProblemError(
            422, "Malformed decision", explain(exc.errors(include_url=False))
        ) from exc


def explain(errors: Any) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg')}" for e in errors
    )
