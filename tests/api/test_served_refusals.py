"""A body over the limit, sent to a real ``airlock api`` (uvicorn) process, gets its 413
problem+json, read by the client (issue 27, defect 4): the API reads what is left of a
refused body and throws it away before it answers, so it never closes a connection with
some of the request unread, which makes the kernel reset it and the client lose the
answer. The drain's bound: ``tests/unit/test_drain.py``."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from airlock.workers.testing import Process, free_port, wait_for

SECRET = "whsec_" + base64.b64encode(b"airlock-served-secret-0123456789").decode()
TOKEN = "served-token-0123456789"
FIVE_MB = 5 * 1024 * 1024
CHUNK = 64 * 1024


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``airlock api`` as installed (the venv's console script), on embedded defaults."""
    tmp = tmp_path_factory.mktemp("served")
    airlock = str(Path(sys.executable).with_name("airlock"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env |= {
        "AIRLOCK_DATABASE_URL": f"sqlite:///{tmp / 'airlock.db'}",
        "AIRLOCK_HOME": str(tmp / "home"),
        "AIRLOCK_API_TOKEN": TOKEN,
        "AIRLOCK_WEBHOOK_SECRET": SECRET,
    }
    subprocess.run([airlock, "db", "upgrade"], env=env, cwd=tmp, check=True, capture_output=True)
    port = free_port()
    server = Process("api", [airlock, "api", "--port", str(port)], env, tmp / "api.log", cwd=tmp)
    server.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for("the API", lambda: _answers(base), timeout=30)
        yield base
    finally:
        server.stop()


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _headers(path: str, body: bytes) -> dict[str, str]:
    """A create's bearer token, or an approval signed with the webhook secret."""
    if not path.endswith("/approval"):
        return {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    webhook_id, now = f"msg_{uuid.uuid4().hex}", datetime.now(UTC)
    return {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRET).sign(webhook_id, now, body.decode()),
    }


def _body() -> bytes:
    """5 MB of JSON: a decision whose reason is long."""
    filler = "x" * FIVE_MB
    return json.dumps({"turn_digest": "0" * 64, "decision": "deny", "reason": filler}).encode()


PATHS = [
    pytest.param("/v1/runs", id="create"),
    pytest.param(f"/v1/runs/{uuid.uuid4()}/approval", id="signed-approval"),
]


def _raw_post(base: str, path: str, body: bytes, *, chunked: bool) -> tuple[bytes, bytes]:
    """POST ``body`` over a socket as a plain client does (urllib, for one): the whole
    request, ``Connection: close``, then the answer. Returns the status line and the
    answer's body; a reset connection fails here."""
    host, port = base.removeprefix("http://").split(":")
    lines = [f"POST {path} HTTP/1.1", f"host: {host}", "connection: close"]
    lines += [f"{k}: {v}" for k, v in _headers(path, body).items()]
    lines.append("transfer-encoding: chunked" if chunked else f"content-length: {len(body)}")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        for start in range(0, len(body), CHUNK):
            part = body[start : start + CHUNK]
            sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
        answer = b""
        while data := sock.recv(65536):
            answer += data
    head, _, content = answer.partition(b"\r\n\r\n")
    return head, content


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", PATHS)
def test_a_5_mb_body_gets_its_413_read_by_a_client_that_sends_it_whole(
    api: str, path: str, chunked: bool
) -> None:
    head, content = _raw_post(api, path, _body(), chunked=chunked)
    assert head.startswith(b"HTTP/1.1 413 "), head
    assert b"content-type: application/problem+json" in head.lower()
    assert json.loads(content)["status"] == 413


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", PATHS)
def test_a_5_mb_body_gets_its_413_over_a_kept_connection(
    api: str, path: str, chunked: bool
) -> None:
    body = _body()
    content: Any = (body[i : i + CHUNK] for i in range(0, len(body), CHUNK)) if chunked else body
    with httpx.Client(timeout=30) as client:
        response = client.post(f"{api}{path}", content=content, headers=_headers(path, body))
        assert response.status_code == 413, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["status"] == 413
        # the body was read to its end: the connection is kept for the next request
        assert "close" not in response.headers.get("connection", "")


def test_an_unauthenticated_5_mb_create_gets_its_401_read(api: str) -> None:
    host, port = api.removeprefix("http://").split(":")
    body = _body()
    head = (
        f"POST /v1/runs HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode() + body)
        answer = b""
        while data := sock.recv(65536):
            answer += data
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]


def test_a_client_that_waits_for_100_continue_gets_the_413_without_sending(api: str) -> None:
    host, port = api.removeprefix("http://").split(":")
    head = (
        f"POST /v1/runs HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {TOKEN}\r\n"
        f"content-type: application/json\r\nexpect: 100-continue\r\n"
        f"content-length: {FIVE_MB}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head.encode())
        answer = b""
        while data := sock.recv(65536):  # the server closes: the body is never asked for
            answer += data
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"100 Continue" not in answer
    assert b"connection: close" in answer.lower()
