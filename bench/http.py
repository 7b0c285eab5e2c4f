"""A light HTTP/1.1 client for the benchmarks' load: one kept-alive socket, requests
written whole and responses read by their Content-Length, with the few methods of
``httpx.Client`` that the W1 helpers use. On a 2-core host the load generator
shares the cores with the API, the worker and the database, and whatever CPU it
spends is taken from them: httpx costs more CPU than the standard library's
``http.client``, which itself parses every response's headers with the ``email``
package (measured in ``bench/results/approval_path.jsonl``'s ``clients`` column before
and after; the figures are in BENCHMARKS.md). Not a general client: a chunked response or a closed
connection is an error, never a silent retry (a retried create would make two
runs)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

IDLE = 2.0
"""Seconds after which a kept connection is replaced rather than reused (uvicorn
closes an idle one after 5 s)."""


class Response:
    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class Client:
    """One kept-alive connection to the host of the first URL it is given."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._netloc = ""
        self._buffer = b""
        self._used = 0.0

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Response:
        parts = urlsplit(url)
        if self._sock is not None and (
            time.monotonic() - self._used > IDLE or parts.netloc != self._netloc
        ):
            self.close()
        if self._sock is None:
            self._sock = _connect(parts.hostname or "127.0.0.1", parts.port or 80)
            self._netloc = parts.netloc
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        self._sock.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b""))
        response = self._read()
        self._used = time.monotonic()
        return response

    def _read(self) -> Response:
        head = self._until(b"\r\n\r\n")
        status_line, *fields = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        length: int | None = None
        close = False
        for field in fields:
            name, _, value = field.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                raise RuntimeError(f"bench.http reads Content-Length bodies, not {value.strip()}")
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        content = self._exactly(length or 0)
        if close:
            self.close()
        return Response(status, content)

    def _until(self, mark: bytes) -> bytes:
        while (end := self._buffer.find(mark)) < 0:
            self._fill()
        head, self._buffer = self._buffer[:end], self._buffer[end + len(mark) :]
        return head

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        content, self._buffer = self._buffer[:size], self._buffer[size:]
        return content

    def _fill(self) -> None:
        assert self._sock is not None
        chunk = self._sock.recv(65536)
        if not chunk:
            self.close()
            raise ConnectionError("the server closed the connection")
        self._buffer += chunk

    def get(self, url: str, headers: dict[str, str] | None = None) -> Response:
        return self._send("GET", url, None, dict(headers or {}))

    def post(
        self,
        url: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        sent = dict(headers or {})
        if json is not None:
            content = _dumps(json)
            sent.setdefault("content-type", "application/json")
        return self._send("POST", url, content or b"", sent)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer = b""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _connect(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


class AsyncClient:
    """``Client`` on asyncio: one kept-alive connection, for the hundreds of clients of
    ``bench.w2`` in one thread (a thread each would cost more CPU than they measure)."""

    def __init__(self) -> None:
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._netloc = ""
        self._used = 0.0

    async def _send(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> Response:
        parts = urlsplit(url)
        if self._writer is not None and (
            time.monotonic() - self._used > IDLE or parts.netloc != self._netloc
        ):
            self.close()
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(
                parts.hostname or "127.0.0.1", parts.port or 80
            )
            sock = self._writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._netloc = parts.netloc
        assert self._reader is not None
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        lines = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        self._writer.write("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b""))
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            self.close()
            raise ConnectionError("the server closed the connection") from exc
        status_line, *fields = head[:-4].decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        length = 0
        close = False
        for field in fields:
            name, _, value = field.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding":
                raise RuntimeError(f"bench.http reads Content-Length bodies, not {value.strip()}")
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        content = await self._reader.readexactly(length)
        if close:
            self.close()
        self._used = time.monotonic()
        return Response(status, content)

    async def get(self, url: str, headers: dict[str, str] | None = None) -> Response:
        return await self._send("GET", url, None, dict(headers or {}))

    async def post(
        self,
        url: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        sent = dict(headers or {})
        if json is not None:
            content = _dumps(json)
            sent.setdefault("content-type", "application/json")
        return await self._send("POST", url, content or b"", sent)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._reader = None
