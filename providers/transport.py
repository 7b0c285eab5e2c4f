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

What it adds: a deadline for the whole exchange (the request extension ``DEADLINE``,
seconds), which httpx's timeouts are not: they bound each read, and an answer that
trickles in a byte at a time never meets them. Past its deadline the exchange's socket
is shut down by one watchdog thread per process (a greenlet under gevent), which ends
the read wherever it waits, in any pool; the caller gets ``httpx.ReadTimeout``. The
connect and each read are bounded by what is left of the deadline too. A name lookup
is not (the resolver cannot be interrupted).

Proxies: an ``httpx.Client`` given this transport still routes the URLs that
``HTTP(S)_PROXY`` names through httpx's own proxy transport (``trust_env``).
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import http.client
import itertools
import os
import socket
import ssl
import threading
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
DEADLINE = "airlock.deadline"
"""The request extension that gives the whole exchange a deadline, in seconds."""


class _Deadline:
    """One exchange's deadline: when it passes, the socket of the connection that
    carries the exchange is shut down (once; a connection since taken by another
    exchange is left alone)."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.fired = False
        self.done = False
        self._lock = threading.Lock()
        self._conn: Any = None

    def left(self) -> float:
        return max(0.001, self.at - time.monotonic())

    def arm(self, conn: Any) -> None:
        with self._lock:
            self._conn = conn
            conn._airlock_deadline = self
            if self.fired:
                _shut(conn)

    def fire(self) -> None:
        with self._lock:
            if self.done:
                return
            self.fired = True
            conn = self._conn
            if conn is not None and getattr(conn, "_airlock_deadline", None) is self:
                _shut(conn)


def _shut(conn: Any) -> None:
    sock = getattr(conn, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """Fires each deadline when it passes, from one thread of this process."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, _Deadline]] = []
        self._cond = threading.Condition()
        self._order = itertools.count()
        self._pid = 0

    def watch(self, deadline: _Deadline) -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread yet
                self._pid = os.getpid()
                self._due = []
                threading.Thread(target=self._run, name="airlock-deadlines", daemon=True).start()
            heapq.heappush(self._due, (deadline.at, next(self._order), deadline))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._cond.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, deadline = heapq.heappop(self._due)
            deadline.fire()


_watchdog = _Watchdog()
_current: contextvars.ContextVar[_Deadline | None] = contextvars.ContextVar(
    "airlock_deadline", default=None
)


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

    def request(self, *args: Any, **kwargs: Any) -> None:
        if (deadline := _current.get()) is not None:
            deadline.arm(self)
        super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self) -> Any:
        if (deadline := _current.get()) is not None:
            deadline.arm(self)  # connected by now: its socket can be shut down
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
        connect, read = timeouts.get("connect"), timeouts.get("read")
        deadline = None
        if (seconds := request.extensions.get(DEADLINE)) is not None:
            deadline = _Deadline(float(seconds))
            connect, read = _within(connect, deadline), _within(read, deadline)
            _watchdog.watch(deadline)
        timeout = urllib3.Timeout(connect=connect, read=read)
        headers = urllib3.HTTPHeaderDict()
        for key, value in request.headers.multi_items():
            headers.add(key, value)
        token = _current.set(deadline)
        try:
            answer = self._open(request, url, headers, timeout, deadline)
        except BaseException:
            if deadline is not None:
                deadline.done = True
            raise
        finally:
            _current.reset(token)
        return httpx.Response(
            status_code=answer.status,
            headers=list(answer.headers.items()),
            stream=_Body(answer, request, deadline),
            extensions={
                "http_version": b"HTTP/1.0" if answer.version == 10 else b"HTTP/1.1",
                "reason_phrase": answer.reason.encode("latin-1") if answer.reason else b"",
            },
        )

    def _open(
        self,
        request: httpx.Request,
        url: httpx.URL,
        headers: urllib3.HTTPHeaderDict,
        timeout: urllib3.Timeout,
        deadline: _Deadline | None,
    ) -> urllib3.BaseHTTPResponse:
        with _mapped(request, deadline):
            pool = self._pools.connection_from_host(url.host, url.port, url.scheme)
            return pool.urlopen(
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

    def close(self) -> None:
        self._pools.clear()


class _Body(httpx.SyncByteStream):
    """An answer's body, read from its connection; closing it gives the connection back
    to its pool if the body was read to its end, and closes it if not."""

    def __init__(
        self, answer: urllib3.BaseHTTPResponse, request: httpx.Request, deadline: _Deadline | None
    ) -> None:
        self._answer = answer
        self._request = request
        self._deadline = deadline

    def __iter__(self) -> Iterator[bytes]:
        with _mapped(self._request, self._deadline):
            yield from self._answer.stream(CHUNK, decode_content=False)
            if self._deadline is not None and self._deadline.fired:
                raise _ExpiredError  # the shut socket ended the body early

    def close(self) -> None:
        if self._deadline is not None:
            self._deadline.done = True
        # read to its end: already given back by urllib3; if not, the connection is
        # closed, and the closed one given back (it connects afresh when next taken)
        self._answer.close()
        self._answer.release_conn()


def _within(timeout: float | None, deadline: _Deadline) -> float:
    return deadline.left() if timeout is None else min(timeout, deadline.left())


class _ExpiredError(Exception):
    """The exchange's deadline passed (its socket was shut down)."""


def _mapped(request: httpx.Request, deadline: _Deadline | None = None) -> Any:
    return _Mapper(request, deadline)


class _Mapper:
    """Raises the ``httpx`` exception httpx's own transport raises for the same failure,
    and ``httpx.ReadTimeout`` for any failure once the exchange's deadline has passed."""

    def __init__(self, request: httpx.Request, deadline: _Deadline | None) -> None:
        self._request = request
        self._deadline = deadline

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is None:
            return
        if self._deadline is not None and self._deadline.fired:
            message = "the exchange did not end within its deadline"
            raise httpx.ReadTimeout(message, request=self._request) from exc
        if not isinstance(exc, urllib3.exceptions.HTTPError | OSError):
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
