"""``Client``: the Airlock API over one pooled ``httpx.Client``."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from types import TracebackType

import httpx
from httpx_sse import EventSource
from pydantic import JsonValue

from airlock.client import calls as wire
from airlock.client.calls import Call
from airlock.client.errors import WaitTimeoutError, error_of
from airlock.client.models import Decision, Event, Run, RunStatus
from airlock.client.webhooks import ApprovalClient

STREAM_READ = 45.0
"""Seconds a stream may stay silent before it is taken for lost (the API sends a
heartbeat every 15 s)."""


class Client:
    """The Airlock API (DESIGN §9). ``token``: ``AIRLOCK_API_TOKEN`` or an OIDC token;
    ``approval_client`` signs decisions (else they are sent with the bearer token, which
    must then be an OIDC subject's). Requests share one connection pool; those that may
    be repeated (reads, a create with an idempotency key, a signed decision) are sent
    again, up to ``retries`` times, after a lost connection or a 502/503/504. Every
    refusal raises ``AirlockError`` (a subclass by status) with ``.problem``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        approval_client: ApprovalClient | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        reconnects: int = 10,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.approval_client = approval_client
        self.retries = retries
        self.reconnects = reconnects
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers=wire.headers_of(token),
            timeout=httpx.Timeout(timeout),
            transport=transport,
            follow_redirects=False,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, content=call.content,
                    headers=call.headers,
                )  # fmt: skip
            except httpx.TransportError as exc:
                if not wire.retried(call, attempt, self.retries, exc):
                    raise
            else:
                if not wire.retried(call, attempt, self.retries, response.status_code):
                    return response
            time.sleep(wire.backoff(attempt))

    # -- runs --------------------------------------------------------------------------

    def create_run(
        self,
        agent: str,
        input: str,
        idempotency_key: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        *,
        requested_by: str | None = None,
    ) -> Run:
        """A new run; with ``idempotency_key``, the run that key made for the same
        request (a key reused for another request raises ``ConflictError``)."""
        call = wire.create_call(agent, input, idempotency_key, metadata, requested_by)
        return wire.run_of(self._send(call))

    def get_run(self, run_id: str) -> Run:
        return wire.run_of(self._send(Call("GET", wire.run_path(run_id), idempotent=True)))

    def list_runs(
        self,
        status: RunStatus | str | None = None,
        agent: str | None = None,
        *,
        page_size: int = 200,
    ) -> Iterator[Run]:
        """Every run (newest first), page after page as it is iterated."""
        cursor: str | None = None
        while True:
            page = wire.checked(self._send(wire.list_call(status, agent, cursor, page_size)))
            yield from (Run.model_validate(r) for r in page["runs"])
            cursor = page["next_cursor"]
            if cursor is None:
                return

    def events(self, run_id: str) -> list[Event]:
        """The run's events so far, in order."""
        found: list[Event] = []
        while True:
            after = found[-1].seq if found else 0
            page = wire.events_of(self._send(wire.events_call(run_id, after)))
            found += page
            if len(page) < wire.EVENTS_PAGE:
                return found

    def cancel(self, run_id: str) -> Run:
        return wire.run_of(self._send(Call("POST", wire.run_path(run_id, "/cancel"))))

    def retry(self, run_id: str) -> Run:
        """A failed run continues from its last checkpoint."""
        return wire.run_of(self._send(Call("POST", wire.run_path(run_id, "/retry"))))

    # -- streams -----------------------------------------------------------------------

    def stream(self, run_id: str, after: int | None = None) -> Iterator[Event]:
        """The run's events after ``after`` (all, by default), then live ones as they
        come, until the run is over and every event was sent. A dropped connection is
        reconnected with ``Last-Event-ID`` (up to ``reconnects`` times in a row)."""
        return self._events(run_id, after, None)

    def wait(self, run_id: str, timeout: float) -> Run:
        """The run view once the run waits for a decision or is finished, watched on its
        event stream. Raises ``WaitTimeoutError`` after ``timeout`` seconds (checked
        whenever the stream delivers something, at least every heartbeat)."""
        deadline = time.monotonic() + timeout
        run = self.get_run(run_id)
        if run.settled:
            return run
        for event in self._events(run_id, None, deadline):
            if event.kind in wire.SETTLING_KINDS:
                run = self.get_run(run_id)
                if run.settled:
                    return run
        run = self.get_run(run_id)  # the stream ended: the run is over
        if run.settled:
            return run
        raise WaitTimeoutError(f"run {run_id} is {run.status} after {timeout} s")

    def _events(self, run_id: str, after: int | None, deadline: float | None) -> Iterator[Event]:
        cursor, failures = after, 0
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeoutError(f"run {run_id} did not settle in time")
            read = STREAM_READ if deadline is None else max(0.01, deadline - time.monotonic())
            call = wire.stream_call(run_id, cursor)
            try:
                with self._http.stream(
                    "GET", call.path, headers=call.headers,
                    timeout=httpx.Timeout(self._http.timeout.connect, read=min(read, STREAM_READ)),
                ) as response:  # fmt: skip
                    if response.status_code >= 400:
                        response.read()
                        raise error_of(response)
                    for sse in EventSource(response).iter_sse():
                        if sse.event == "end":
                            return
                        if sse.event != "message" or not sse.data:
                            continue  # the stream's ``retry:`` advice
                        event = Event.model_validate_json(sse.data)
                        cursor, failures = event.seq, 0
                        yield event
                        if deadline is not None and time.monotonic() >= deadline:
                            raise WaitTimeoutError(f"run {run_id} did not settle in time")
                failures += 1  # closed before the end: reconnect
            except httpx.TransportError:
                failures += 1
                if failures > self.reconnects:
                    raise
            time.sleep(wire.backoff(failures))

    # -- decisions ---------------------------------------------------------------------

    def approve(
        self,
        run_id: str,
        turn_digest: str,
        calls: Mapping[str, Mapping[str, JsonValue]] | None = None,
        reason: str | None = None,
        *,
        approver: str | None = None,
    ) -> Decision:
        """Approve the turn ``turn_digest`` names (``calls``: per call decisions
        ``{call_id: {"decision": "approve" | "deny" | "edit", ...}}`` beside it)."""
        return self._decide(run_id, turn_digest, "approve", calls, reason=reason, approver=approver)

    def deny(
        self, run_id: str, turn_digest: str, reason: str, *, approver: str | None = None
    ) -> Decision:
        return self._decide(run_id, turn_digest, "deny", None, reason=reason, approver=approver)

    def decide(
        self,
        run_id: str,
        turn_digest: str,
        calls: Mapping[str, Mapping[str, JsonValue]],
        *,
        reason: str | None = None,
        approver: str | None = None,
    ) -> Decision:
        """Decide each call of the turn: ``{call_id: {"decision": "approve" | "deny" |
        "edit", "arguments"?, "reason"?}}``; a call that asks and is not named is denied
        (with ``reason``)."""
        reason = reason or "not approved"
        return self._decide(run_id, turn_digest, "deny", calls, reason=reason, approver=approver)

    def _decide(
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
        return wire.decision_of(self._send(call))
