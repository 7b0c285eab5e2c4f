"""The standing grants' routes: ``GET /v1/grants`` (live ones, or ``?state=all``),
``GET /v1/grants/{id}`` and ``POST /v1/grants/{id}/revoke``. A grant is given with an
approval (its body's ``grant``)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import FastAPI, Query, Request
from pydantic import JsonValue

from airlock.workers.http.handlers import Handlers, caller_of
from airlock.workers.http.problems import SafeJSONResponse
from airlock.workers.service.grants import view


def mount(app: FastAPI, handlers: Handlers) -> None:
    service = handlers.service

    @app.get("/v1/grants")
    def list_grants(
        state: Literal["active", "all"] = "active",
        agent: Annotated[str | None, Query(max_length=200)] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 100,
    ) -> SafeJSONResponse:
        now = service.grants.now()
        found = service.grants.list(state=state, agent=agent, limit=limit)
        grants: list[JsonValue] = [view(g, now) for g in found]
        return SafeJSONResponse({"grants": grants})

    @app.get("/v1/grants/{grant_id}")
    def get_grant(grant_id: str) -> SafeJSONResponse:
        return SafeJSONResponse(view(service.grants.get(grant_id), service.grants.now()))

    @app.post("/v1/grants/{grant_id}/revoke")
    def revoke_grant(grant_id: str, request: Request) -> SafeJSONResponse:
        by = handlers.principal_of(caller_of(request.scope))
        revoked = service.grants.revoke(grant_id, by=by)
        return SafeJSONResponse(view(revoked, service.grants.now()))
