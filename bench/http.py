"""A light HTTP/1.1 client for the benchmarks' load: the standard library's
``http.client`` on one kept-alive connection, with the few methods of ``httpx.Client``
that the W1 helpers use. On a 2-core host the load generator shares the cores with
the API, the worker and the database; httpx costs about three times its CPU per
request, which the measure would otherwise charge to the server."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

IDLE = 2.0
"""Seconds after which a kept connection is replaced rather than reused."""


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
        self._conn: http.client.HTTPConnection | None = None
        self._used = 0.0

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Response:
        parts = urlsplit(url)
        if self._conn is not None and time.monotonic() - self._used > IDLE:
            self.close()  # the server may have closed it (uvicorn keeps an idle one 5 s)
        if self._conn is None:
            self._conn = http.client.HTTPConnection(parts.netloc, timeout=30)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._conn.request(method, path, body=body, headers=headers)
        answer = self._conn.getresponse()
        response = Response(answer.status, answer.read())
        self._used = time.monotonic()
        return response

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
        return self._send("POST", url, content, sent)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()
