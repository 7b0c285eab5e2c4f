"""What ``Client`` and ``AsyncClient`` share: each operation as a request (``Call``),
whether it may be sent again, how an answer is read, and the retry schedule. No I/O."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import JsonValue

from airlock.client.errors import error_of
from airlock.client.models import Decision, Event, Run, RunStatus
from airlock.client.webhooks import ApprovalClient

RETRIED_STATUSES = frozenset({502, 503, 504})
"""Answers of a proxy or an API starting up: an idempotent request is sent again."""
EVENTS_PAGE = 1000
"""Events read at once (the API's largest page)."""
SETTLING_KINDS = frozenset({"suspended", "completed", "failed", "cancelled", "expired"})
"""Events after which a run may wait for a decision or be finished (``wait`` reads it)."""


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    params: dict[str, str | int] = field(default_factory=dict)
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    idempotent: bool = False
    """Sent again after a lost connection or a 502/503/504: a read, a create with an
    idempotency key, a signed decision (its webhook-id makes a repeat a replay)."""


def run_path(run_id: str, tail: str = "") -> str:
    return f"/v1/runs/{quote(run_id, safe='')}{tail}"


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def create_call(
    agent: str,
    input: str,
    idempotency_key: str | None,
    metadata: Mapping[str, JsonValue] | None,
    requested_by: str | None,
) -> Call:
    body: dict[str, JsonValue] = {"agent": agent, "input": input}
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    if metadata is not None:
        body["metadata"] = dict(metadata)
    if requested_by is not None:
        body["requested_by"] = requested_by
    json_type = {"content-type": "application/json"}
    return Call("POST", "/v1/runs", content=_json(body), headers=json_type,
                idempotent=idempotency_key is not None)  # fmt: skip


def list_call(
    status: RunStatus | str | None, agent: str | None, cursor: str | None, page_size: int
) -> Call:
    params: dict[str, str | int] = {"limit": page_size}
    for name, value in (("status", status), ("agent", agent), ("cursor", cursor)):
        if value is not None:
            params[name] = str(value)
    return Call("GET", "/v1/runs", params=params, idempotent=True)


def events_call(run_id: str, after: int) -> Call:
    params: dict[str, str | int] = {"after": after, "limit": EVENTS_PAGE}
    return Call("GET", run_path(run_id, "/events"), params=params, idempotent=True)


def stream_call(run_id: str, after: int | None) -> Call:
    headers = {"accept": "text/event-stream", "cache-control": "no-store"}
    if after is not None:
        headers["last-event-id"] = str(after)
    return Call("GET", run_path(run_id, "/events/stream"), headers=headers, idempotent=True)


def decision_body(
    turn_digest: str,
    decision: str,
    *,
    calls: Mapping[str, Mapping[str, JsonValue]] | None = None,
    reason: str | None = None,
    approver: str | None = None,
) -> dict[str, JsonValue]:
    body: dict[str, JsonValue] = {"turn_digest": turn_digest, "decision": decision}
    if calls is not None:
        body["calls"] = {call_id: dict(c) for call_id, c in calls.items()}
    if reason is not None:
        body["reason"] = reason
    if approver is not None:
        body["approver"] = approver
    return body


def decision_call(run_id: str, body: dict[str, JsonValue], signer: ApprovalClient | None) -> Call:
    """The approval webhook's request: signed by the approval client (its approver named
    unless the body names one), else sent with the client's bearer token (an OIDC
    subject's)."""
    if signer is not None and signer.approver is not None:
        body = {"approver": signer.approver, **body}
    content = _json(body)
    headers = {"content-type": "application/json"}
    if signer is not None:
        headers |= signer.sign(content)
    return Call("POST", run_path(run_id, "/approval"), content=content, headers=headers,
                idempotent=signer is not None)  # fmt: skip


def checked(response: httpx.Response) -> Any:
    """The JSON of a successful answer; a refusal raised as its ``AirlockError``."""
    if response.status_code >= 400:
        raise error_of(response)
    return response.json()


def run_of(response: httpx.Response) -> Run:
    return Run.model_validate(checked(response))


def decision_of(response: httpx.Response) -> Decision:
    return Decision.model_validate(checked(response))


def events_of(response: httpx.Response) -> list[Event]:
    return [Event.model_validate(e) for e in checked(response)["events"]]


def retried(call: Call, attempt: int, retries: int, error: Exception | int) -> bool:
    """Whether ``call`` is sent again after its ``attempt``-th try ended in ``error`` (an
    exception of httpx, or a status): an idempotent one after a lost connection or a
    proxy's 5xx; any after a connection that was never made (nothing was sent)."""
    if attempt > retries:
        return False
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
        return True
    if not call.idempotent:
        return False
    if isinstance(error, int):
        return error in RETRIED_STATUSES
    return isinstance(error, httpx.TransportError)


def backoff(attempt: int, base: float = 0.2, cap: float = 5.0) -> float:
    """Seconds before try ``attempt + 1``: exponential, with full jitter."""
    return random.uniform(0, min(cap, base * 2 ** (attempt - 1)))


def headers_of(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}
