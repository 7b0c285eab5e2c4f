"""The client's pure parts: which requests are sent again, how a refusal is raised, and
its Standard Webhooks signatures (verified by the library the API verifies with)."""

from __future__ import annotations

import json

import httpx
import pytest
from standardwebhooks import Webhook

from airlock.client import (
    AirlockError,
    ApprovalClient,
    ConflictError,
    InvalidSignatureError,
    NotFoundError,
    ServerError,
    ServiceUnavailableError,
    verify_notification,
)
from airlock.client import calls as wire
from airlock.client.errors import error_of
from airlock.workers.testing import SECRET

DIGEST = "a" * 64


def test_reads_keyed_creates_and_signed_decisions_are_sent_again() -> None:
    read = wire.Call("GET", "/v1/runs/x", idempotent=True)
    keyed = wire.create_call("w1", "hi", "key-1", None, None)
    unkeyed = wire.create_call("w1", "hi", None, None, None)
    signed = wire.decision_call("r", {"turn_digest": DIGEST}, ApprovalClient("default", SECRET))
    bearer = wire.decision_call("r", {"turn_digest": DIGEST}, None)
    lost = httpx.ReadError("connection reset")
    for call in (read, keyed, signed):
        assert wire.retried(call, 1, 3, lost) and wire.retried(call, 1, 3, 503)
        assert not wire.retried(call, 4, 3, lost)  # retries spent
        assert not wire.retried(call, 1, 3, 500)  # the API's own error is not transient
    for call in (unkeyed, bearer, wire.Call("POST", "/v1/runs/x/cancel")):
        assert not wire.retried(call, 1, 3, lost) and not wire.retried(call, 1, 3, 503)
        assert wire.retried(call, 1, 3, httpx.ConnectError("refused"))  # nothing was sent


def test_a_refusal_is_raised_as_its_status_with_the_problem() -> None:
    problem = {"type": "about:blank", "title": "Conflict", "status": 409, "detail": "decided"}
    error = error_of(httpx.Response(409, json=problem))
    assert isinstance(error, ConflictError) and isinstance(error, AirlockError)
    assert error.status == 409 and error.problem == problem and "decided" in str(error)
    assert isinstance(error_of(httpx.Response(404, json={})), NotFoundError)
    assert isinstance(error_of(httpx.Response(503, json={})), ServiceUnavailableError)
    odd = error_of(httpx.Response(502, text="bad gateway"))
    assert isinstance(odd, ServerError) and odd.problem["detail"] == "bad gateway"


def test_a_signed_decision_verifies_as_the_api_verifies_it() -> None:
    call = wire.decision_call(
        "r1", {"turn_digest": DIGEST, "decision": "approve"}, ApprovalClient("d", SECRET, "ann")
    )
    assert call.content is not None
    verified = Webhook(SECRET).verify(call.content, call.headers)
    assert verified == {"approver": "ann", "turn_digest": DIGEST, "decision": "approve"}
    assert call.path == "/v1/runs/r1/approval"


def notification() -> bytes:
    run = {
        "id": "r1", "agent": "w1", "status": "completed", "termination": "completed",
        "iterations": 2, "usage": {"prompt_tokens": 1, "completion_tokens": 2},
        "output": "done", "error": None, "metadata": {}, "created_at": None,
        "updated_at": None, "pending": None,
    }  # fmt: skip
    return json.dumps(
        {"type": "run.completed", "timestamp": "2026-12-07T10:00:00+00:00", "data": run}
    ).encode()


def test_verify_notification_returns_the_typed_event_or_refuses() -> None:
    body = notification()
    headers = ApprovalClient("notify", SECRET).sign(body)
    event = verify_notification(SECRET, {k.title(): v for k, v in headers.items()}, body)
    assert event.type == "run.completed" and event.data.output == "done"
    with pytest.raises(InvalidSignatureError):
        verify_notification(SECRET, headers, body.replace(b"done", b"gone"))
    with pytest.raises(InvalidSignatureError):
        verify_notification(SECRET, {}, body)
