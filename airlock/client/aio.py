"""``AsyncClient``: ``Client``'s methods on asyncio, over one pooled ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from types import TracebackType

import httpx
from httpx_sse import EventSource
from pydantic import JsonValue

from airlock.client import calls as wire
from airlock.client.calls import Call
from airlock.client.errors import WaitTimeoutError, error_of
from airlock.client.models import Decision, Event, Run, RunStatus
from airlock.client.sync import STREAM_READ
from airlock.client.webhooks import ApprovalClient


class AsyncClient:
    """``Client`` (see there), each method a coroutine (``list_runs`` and ``stream``:
    async iterators)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        approval_client: ApprovalClient | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        reconnects: int = 10,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.approval_client = approval_client
        self.retries = retries
        self.reconnects = reconnects
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=wire.headers_of(token),
            timeout=httpx.Timeout(timeout),
            transport=transport,
            follow_redirects=False,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, content=call.content,
                    headers=call.headers,
                )  # fmt: skip
            except httpx.TransportError as exc:
                if not wire.retried(call, attempt, self.retries, exc):
                    raise
            else:
                if not wire.retried(call, attempt, self.retries, response.status_code):
                    return response
            await asyncio.sleep(wire.backoff(attempt))

    async def create_run(
        self,
        agent: str,
        input: str,
        idempotency_key: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        *,
        requested_by: str | None = None,
    ) -> Run:
        call = wire.create_call(agent, input, idempotency_key, metadata, requested_by)
        return wire.run_of(await self._send(call))

    async def get_run(self, run_id: str) -> Run:
        return wire.run_of(await self._send(Call("GET", wire.run_path(run_id), idempotent=True)))

    async def list_runs(
        self,
        status: RunStatus | str | None = None,
        agent: str | None = None,
        *,
        page_size: int = 200,
    ) -> AsyncIterator[Run]:
        cursor: str | None = None
        while True:
            page = wire.checked(await self._send(wire.list_call(status, agent, cursor, page_size)))
            for r in page["runs"]:
                yield Run.model_validate(r)
            cursor = page["next_cursor"]
            if cursor is None:
                return

    async def events(self, run_id: str) -> list[Event]:
        found: list[Event] = []
        while True:
            after = found[-1].seq if found else 0
            page = wire.events_of(await self._send(wire.events_call(run_id, after)))
            found += page
            if len(page) < wire.EVENTS_PAGE:
                return found

    async def cancel(self, run_id: str) -> Run:
        return wire.run_of(await self._send(Call("POST", wire.run_path(run_id, "/cancel"))))

    async def retry(self, run_id: str) -> Run:
        return wire.run_of(await self._send(Call("POST", wire.run_path(run_id, "/retry"))))

    def stream(self, run_id: str, after: int | None = None) -> AsyncIterator[Event]:
        return self._events(run_id, after)

    async def wait(self, run_id: str, timeout: float) -> Run:
        """As ``Client.wait``; the timeout is kept to the moment."""
        try:
            async with asyncio.timeout(timeout):
                return await self._settled(run_id)
        except TimeoutError as exc:
            raise WaitTimeoutError(f"run {run_id} did not settle in {timeout} s") from exc

    async def _settled(self, run_id: str) -> Run:
        run = await self.get_run(run_id)
        if run.settled:
            return run
        async for event in self._events(run_id, None):
            if event.kind in wire.SETTLING_KINDS:
                run = await self.get_run(run_id)
                if run.settled:
                    return run
        return await self.get_run(run_id)  # the stream ended: the run is over

    async def _events(self, run_id: str, after: int | None) -> AsyncIterator[Event]:
        cursor, failures = after, 0
        read = httpx.Timeout(self._http.timeout.connect, read=STREAM_READ)
        while True:
            call = wire.stream_call(run_id, cursor)
            try:
                async with self._http.stream(
                    "GET", call.path, headers=call.headers, timeout=read
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_of(response)
                    async for sse in EventSource(response).aiter_sse():
                        if sse.event == "end":
                            return
                        if sse.event != "message" or not sse.data:
                            continue  # the stream's ``retry:`` advice
                        event = Event.model_validate_json(sse.data)
                        cursor, failures = event.seq, 0
                        yield event
                failures += 1  # closed before the end: reconnect
            except httpx.TransportError:
                failures += 1
                if failures > self.reconnects:
                    raise
            await asyncio.sleep(wire.backoff(failures))

    async def approve(
        self,
        run_id: str,
        turn_digest: str,
        calls: Mapping[str, Mapping[str, JsonValue]] | None = None,
        reason: str | None = None,
        *,
        approver: str | None = None,
    ) -> Decision:
        return await self._decide(
            run_id, turn_digest, "approve", calls, reason=reason, approver=approver
        )

    async def deny(
        self, run_id: str, turn_digest: str, reason: str, *, approver: str | None = None
    ) -> Decision:
        return await self._decide(
            run_id, turn_digest, "deny", None, reason=reason, approver=approver
        )

    async def decide(
        self,
        run_id: str,
        turn_digest: str,
        calls: Mapping[str, Mapping[str, JsonValue]],
        *,
        reason: str | None = None,
        approver: str | None = None,
    ) -> Decision:
        reason = reason or "not approved"
        return await self._decide(
            run_id, turn_digest, "deny", calls, reason=reason, approver=approver
        )

    async def _decide(
        self,
        run_id: str,
        turn_digest: str,
        decision: str,
        per_call: Mapping[str, Mapping[str, JsonValue]] | None,
        *,
        reason: str | None,
        approver: str | None,
    ) -> Decision:
        body = wire.decision_body(
            turn_digest, decision, calls=per_call, reason=reason, approver=approver
        )
        call = wire.decision_call(run_id, body, self.approval_client)
        return wire.decision_of(await self._send(call))
