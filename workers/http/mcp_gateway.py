"""``/mcp``: the MCP gateway (``airlock.workers.mcp.gateway``) over Streamable HTTP,
served by the ``mcp`` SDK's own server in stateless mode (any instance answers any
request: what a call waits on is in the database), authenticated as the run endpoints
are (the API token, an OIDC token; ``Authenticator.caller_until``).

A call held for a person waits on its run's transitions through this process's
stream hub (one read of the database per tick for every watched run, on the event
loop: no thread, no connection held while waiting)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from anyio import to_thread
from fastapi import FastAPI
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from airlock.workers.http.auth import Authenticator
from airlock.workers.http.handlers import Handlers
from airlock.workers.http.hub import CLOSE, Hubs
from airlock.workers.http.metrics import CachedCollector
from airlock.workers.http.problems import ProblemError, refusal
from airlock.workers.mcp.gateway import Gateway
from airlock.workers.mcp.server import build_server
from airlock.workers.service import Service
from airlock.workers.service.principals import Principal

PATH = "/mcp"


class McpEndpoint:
    """The ASGI app of ``/mcp``: who calls, then the SDK's session manager."""

    def __init__(
        self, gateway: Gateway, auth: Authenticator, handlers: Handlers, hubs: Hubs
    ) -> None:
        self.gateway = gateway
        self.auth = auth
        self.handlers = handlers
        self.hubs = hubs
        self.server = build_server(
            gateway,
            caller=_principal,
            in_thread=handlers.in_thread,
            wait_run=self.wait_run,
            attending=_present,
            observe=self.observe,
        )
        self.calls = Counter(
            "airlock_mcp_gateway_calls_total",
            "MCP gateway tools/call answers, by server, tool and outcome (forwarded, "
            "denied, invalid, drifted, decided: a held call's result, pending: still held, "
            "task: held, answered as a task)",
            ["server", "tool", "outcome"],
            registry=handlers.metrics.registry,
        )
        self.waits = Histogram(
            "airlock_mcp_gateway_wait_seconds",
            "How long a held tools/call waited for its run, by server, tool and outcome",
            ["server", "tool", "outcome"],
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 25, 60, 120, 300),
            registry=handlers.metrics.registry,
        )
        handlers.metrics.registry.register(_HeldCollector(gateway.service))
        self.manager = StreamableHTTPSessionManager(
            app=self.server, stateless=True, json_response=True
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        try:
            if self.auth.verifies(headers, approval=False):
                caller, _ = await to_thread.run_sync(
                    lambda: self.auth.caller_until(headers.get("authorization"))
                )
            else:
                caller, _ = self.auth.caller_until(headers.get("authorization"))
        except ProblemError as exc:
            await refusal(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = self.handlers.principal_of(caller)
        await self.manager.handle_request(scope, receive, send)

    def observe(self, name: str, outcome: str, seconds: float) -> None:
        server, _, tool = name.partition("__")
        self.calls.labels(server, tool, outcome).inc()
        if outcome in ("decided", "pending"):
            self.waits.labels(server, tool, outcome).observe(seconds)

    async def wait_run(self, run_id: str, seconds: float) -> None:
        """Until the run is over, or ``seconds`` passed."""
        hub = self.hubs.here()
        watch = hub.watch_run(run_id, 0)
        try:
            with anyio.move_on_after(seconds):
                while await watch.frames.get() != CLOSE:
                    pass
        finally:
            hub.leave(watch)


class _HeldCollector(CachedCollector):
    """``airlock_mcp_gateway_held_calls``: the calls held now (their result not yet
    returned), by server and tool, from the database (every instance's)."""

    def _families(self) -> list[Any]:
        held = GaugeMetricFamily(
            "airlock_mcp_gateway_held_calls",
            "MCP gateway calls held now (their result not yet returned), by server and tool",
            labels=["server", "tool"],
        )
        for server, tool, calls in self._service.gateway_figures().held:
            held.add_metric([server, tool.partition("__")[2] or tool], calls)
        return [held]


async def _present(ctx: Any) -> bool:
    """Whether the HTTP client of the request still waits (it did not hang up)."""
    request = getattr(ctx, "request", None)
    if not isinstance(request, Request):
        return True
    return not await request.is_disconnected()


def _principal(ctx: Any) -> Principal:
    request = getattr(ctx, "request", None)
    state = getattr(request, "scope", {}).get("state", {})
    principal = state.get("principal")
    if not isinstance(principal, Principal):  # never: the endpoint notes one on each
        raise MCPError(types.INTERNAL_ERROR, "the caller was not identified")
    return principal


def mount(app: FastAPI, endpoint: McpEndpoint) -> None:
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    app.state.mcp = endpoint


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[None]:
    """The session manager's task group, while the app serves."""
    endpoint: McpEndpoint | None = getattr(app.state, "mcp", None)
    if endpoint is None:
        yield
        return
    async with endpoint.manager.run():
        yield


__all__ = ["McpEndpoint", "mount", "running"]


def serve(
    app: FastAPI,
    service: Service,
    wait: float,
    *,
    auth: Authenticator,
    handlers: Handlers,
    hubs: Hubs,
) -> None:
    """``/mcp``, the MCP gateway to the declared MCP servers' tools."""
    from airlock.workers.mcp.tools import servers  # noqa: PLC0415 - read when served

    gateway = Gateway(service, list(servers().servers), wait=wait, inbox="/inbox")
    mount(app, McpEndpoint(gateway, auth, handlers, hubs))
