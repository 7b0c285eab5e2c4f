"""The benchmarks' light HTTP client (``bench/http.py``) against a real HTTP/1.1 server
on a socket: what it sends, what it reads, one kept connection, and clear errors for
what it does not do (a chunked body, a connection the server closed)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bench.http import AsyncClient, Client, Response


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]

    def do_GET(self) -> None:
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"2\r\nok\r\n0\r\n\r\n")
            return
        if self.path == "/close":
            self.close_connection = True
            self.wfile.write(b"")
            return
        self._answer(200, b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(201, body)

    def _answer(self, status: int, body: bytes) -> None:
        self.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": dict(self.headers),
                "body": body,
                "peer": self.client_address,
            }
        )
        content = json.dumps({"path": self.path, "echo": body.decode()}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    handler = type("Recording", (Handler,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_requests_and_answers_on_one_kept_connection(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    base, seen = server
    with Client() as client:
        got = client.get(f"{base}/v1/runs/x?after=1", headers={"Authorization": "Bearer t"})
        assert got.status_code == 200
        assert got.json() == {"path": "/v1/runs/x?after=1", "echo": ""}
        made = client.post(f"{base}/v1/runs", json={"agent": "w1", "input": "é"})
        assert made.status_code == 201
        assert json.loads(made.json()["echo"]) == {"agent": "w1", "input": "é"}
        raw = client.post(f"{base}/a", content=b"{}", headers={"content-type": "text/plain"})
        assert raw.text == json.dumps({"path": "/a", "echo": "{}"})
    assert [s["method"] for s in seen] == ["GET", "POST", "POST"]
    assert seen[0]["headers"]["Authorization"] == "Bearer t"
    assert seen[1]["headers"]["content-type"] == "application/json"
    assert seen[2]["headers"]["content-type"] == "text/plain"
    assert seen[1]["headers"]["Content-Length"] == str(len(seen[1]["body"]))
    assert len({s["peer"] for s in seen}) == 1  # one connection for all three


def test_a_chunked_answer_is_an_error_not_a_wrong_body(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    base, _ = server
    with Client() as client, pytest.raises(RuntimeError, match="chunked"):
        client.get(f"{base}/chunked")


def test_a_closed_connection_is_an_error_not_a_retry(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    base, seen = server
    with Client() as client:
        with pytest.raises(ConnectionError, match="closed"):
            client.get(f"{base}/close")
        assert client.get(f"{base}/after").status_code == 200  # a new connection
    assert [s["path"] for s in seen] == ["/after"]


def test_the_asyncio_client_sends_and_reads_on_one_kept_connection(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    base, seen = server

    async def exchange() -> list[Response]:
        client = AsyncClient()
        try:
            return [
                await client.get(f"{base}/v1/runs/x", headers={"Authorization": "Bearer t"}),
                await client.post(f"{base}/v1/runs", json={"agent": "w2", "input": "é"}),
                await client.post(f"{base}/a", content=b"{}", headers={"x": "y"}),
            ]
        finally:
            client.close()

    got, made, raw = asyncio.run(exchange())
    assert got.status_code == 200
    assert got.json() == {"path": "/v1/runs/x", "echo": ""}
    assert made.status_code == 201
    assert json.loads(made.json()["echo"]) == {"agent": "w2", "input": "é"}
    assert raw.text == json.dumps({"path": "/a", "echo": "{}"})
    assert seen[0]["headers"]["Authorization"] == "Bearer t"
    assert seen[1]["headers"]["content-type"] == "application/json"
    assert seen[2]["headers"]["x"] == "y"
    assert len({s["peer"] for s in seen}) == 1  # one connection for all three


def test_the_asyncio_client_says_when_the_server_closed_the_connection(
    server: tuple[str, list[dict[str, Any]]],
) -> None:
    base, seen = server

    async def exchange() -> int:
        client = AsyncClient()
        try:
            with pytest.raises(ConnectionError, match="closed"):
                await client.get(f"{base}/close")
            return (await client.get(f"{base}/after")).status_code  # a new connection
        finally:
            client.close()

    assert asyncio.run(exchange()) == 200
    assert [s["path"] for s in seen] == ["/after"]
