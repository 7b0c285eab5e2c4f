"""An httpx transport (``httpx.BaseTransport``, httpx's documented extension point)
that sends each request on urllib3's connection pool instead of httpcore's.

Why: a gevent worker has hundreds of model calls in flight through one client.
httpcore 1.0.9's pool re-examines every pooled connection and every queued request at
each request's start and each response's close (and ``poll()``s each idle socket), so
its CPU per call grows with the calls in flight (``bench.http_pool``, under gevent;
the figures are in BENCHMARKS.md, W2). urllib3's pool is
a LIFO queue of idle connections per origin: taking one and giving it back is O(1),
whatever is in flight, and it cooperates with gevent's patched sockets and queues.

What stays as it was with httpx's own transport:

- the caller's timeouts, per call: ``connect`` bounds the TCP and TLS handshake (and
  each write of the request), ``read`` each read of the answer;
- keep-alive: a connection goes back to its origin's pool when its answer has been
  read to the end (and is closed if it was not), at most ``keepalive`` kept per
  origin; a kept connection that the server closed meanwhile is found out when it is
  taken (urllib3 polls that one socket) and replaced. No connection is kept more than
  ``KEEPALIVE_EXPIRY`` seconds idle: urllib3 has no such limit, so a connection is stamped
  when it is given back and one idle longer is closed when it is taken;
- one TLS handshake per connection, with httpx's own TLS settings
  (``httpx.create_ssl_context()``: certifi's roots, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``);
- no limit on the connections in flight (a worker's concurrency bounds them), no
  retries and no redirects (the worker's backoff retries; a redirect is an answer);
- errors as httpx's: each urllib3 error becomes the ``httpx`` exception httpx's own
  transport raises for the same failure (``ConnectError``, ``ConnectTimeout``,
  ``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``...), all ``httpx.HTTPError``.

Proxies: an ``httpx.Client`` given this transport still routes the URLs that
``HTTP(S)_PROXY`` names through httpx's own proxy transport (``trust_env``).
"""

from __future__ import annotations

import http.client
import ssl
import time
from collections.abc import Iterator
from typing import Any

import httpx
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)

KEEPALIVE_EXPIRY = 60.0
"""Seconds a connection is kept idle at most."""
CHUNK = 65536
"""Bytes read from the socket at a time while an answer is streamed."""


class _Expiring:
    """Connection mixin: idle past ``KEEPALIVE_EXPIRY`` seconds, it counts as dropped
    (``is_connected`` is what urllib3's pool asks of a connection it takes)."""

    _idle_since: float | None = None

    @property
    def is_connected(self) -> bool:
        idle_since = self._idle_since
        if idle_since is not None and time.monotonic() - idle_since > KEEPALIVE_EXPIRY:
            return False
        return bool(super().is_connected)  # type: ignore[misc]

    def getresponse(self) -> Any:
        answer = super().getresponse()  # type: ignore[misc]
        # idle from here, at the latest: its body is read next, and urllib3 gives the
        # connection back when it reads the end (a long body only makes it expire early)
        self._idle_since = time.monotonic()
        return answer


class _HTTPConnection(_Expiring, HTTPConnection):
    pass


class _HTTPSConnection(_Expiring, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class Urllib3Transport(httpx.BaseTransport):
    """Sends httpx requests on urllib3's pools (see the module's docstring)."""

    def __init__(
        self,
        *,
        keepalive: int = 256,
        ssl_context: ssl.SSLContext | None = None,
        origins: int = 64,
    ) -> None:
        self._pools = urllib3.PoolManager(
            num_pools=origins,
            maxsize=keepalive,
            block=False,  # past ``keepalive`` in flight: a new connection, not a wait
            retries=False,
            ssl_context=ssl_context or httpx.create_ssl_context(),
        )
        self._pools.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(
                f"unsupported URL scheme {url.scheme!r}", request=request
            )
        timeouts = request.extensions.get("timeout", {})
        timeout = urllib3.Timeout(connect=timeouts.get("connect"), read=timeouts.get("read"))
        headers = urllib3.HTTPHeaderDict()
        for key, value in request.headers.multi_items():
            headers.add(key, value)
        with _mapped(request):
            pool = self._pools.connection_from_host(url.host, url.port, url.scheme)
            answer = pool.urlopen(
                request.method,
                url.raw_path.decode("ascii"),
                body=request.read() or None,  # no content-length: 0 on a GET
                headers=headers,
                retries=False,
                redirect=False,
                assert_same_host=False,
                timeout=timeout,
                preload_content=False,
                decode_content=False,  # httpx decodes content-encoding itself
            )
        return httpx.Response(
            status_code=answer.status,
            headers=list(answer.headers.items()),
            stream=_Body(answer, request),
            extensions={
                "http_version": b"HTTP/1.0" if answer.version == 10 else b"HTTP/1.1",
                "reason_phrase": answer.reason.encode("latin-1") if answer.reason else b"",
            },
        )

    def close(self) -> None:
        self._pools.clear()


class _Body(httpx.SyncByteStream):
    """An answer's body, read from its connection; closing it gives the connection back
    to its pool if the body was read to its end, and closes it if not."""

    def __init__(self, answer: urllib3.BaseHTTPResponse, request: httpx.Request) -> None:
        self._answer = answer
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        with _mapped(self._request):
            yield from self._answer.stream(CHUNK, decode_content=False)

    def close(self) -> None:
        # read to its end: already given back by urllib3; if not, the connection is
        # closed, and the closed one given back (it connects afresh when next taken)
        self._answer.close()
        self._answer.release_conn()


def _mapped(request: httpx.Request) -> Any:
    return _Mapper(request)


class _Mapper:
    """Raises the ``httpx`` exception httpx's own transport raises for the same failure."""

    def __init__(self, request: httpx.Request) -> None:
        self._request = request

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is None or not isinstance(exc, urllib3.exceptions.HTTPError | OSError):
            return
        raise _httpx_error(exc)(str(exc), request=self._request) from exc


def _httpx_error(exc: BaseException) -> type[httpx.TransportError]:
    if isinstance(exc, NewConnectionError):  # a subclass of ConnectTimeoutError
        return httpx.ConnectError
    if isinstance(exc, ConnectTimeoutError):
        return httpx.ConnectTimeout
    if isinstance(exc, ReadTimeoutError):
        return httpx.ReadTimeout
    if isinstance(exc, SSLError):
        return httpx.ConnectError
    if isinstance(exc, ProxyError):
        return httpx.ProxyError
    if isinstance(exc, ProtocolError):
        cause = exc.args[1] if len(exc.args) > 1 else exc.__context__
        if isinstance(cause, http.client.HTTPException):  # RemoteDisconnected too
            return httpx.RemoteProtocolError
        return httpx.ReadError
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return httpx.RemoteProtocolError
    return httpx.NetworkError
