"""One asyncio loop per process, in an OS thread of its own, owns every MCP session.

The ``mcp`` SDK is asyncio (anyio); a worker's segments are greenlets (or threads).
Each server gets one session per process, opened on first use and kept across
segments; a session that failed is dropped and the next call opens a new one. The
segments hand it their coroutines with ``asyncio.run_coroutine_threadsafe``
(asyncio's documented door from other threads) and wait for the answer through
``green.wait``, which lets the other segments of a gevent worker run meanwhile. The
loop waits on a selector of the OS, not gevent's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from airlock.loop import AirlockError
from airlock.workers.mcp import green
from airlock.workers.mcp.config import ServerConfig
from airlock.workers.service import native

log = logging.getLogger("airlock")
T = TypeVar("T")
Operation = Callable[[Client], Awaitable[T]]


class McpUnavailableError(AirlockError):
    """The server could not be reached (no session could be opened): nothing was sent."""


def client_for(server: ServerConfig) -> Client:
    """A client of ``server`` through the SDK's own transports."""
    if server.url is not None:
        http = create_mcp_http_client(
            headers=dict(server.headers), timeout=httpx2.Timeout(server.timeout)
        )
        return Client(streamable_http_client(server.url, http_client=http), cache=None)
    assert server.command is not None
    command, *args = server.command
    params = StdioServerParameters(command=command, args=args, env=dict(server.env) or None)
    # the server's stderr goes to the process's own (a Celery worker's sys.stderr is a
    # logging proxy, which has no file descriptor to give a child)
    return Client(stdio_client(params, errlog=sys.__stderr__ or sys.stderr), cache=None)


class _Session:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.ready = anyio.Event()
        self.closing = anyio.Event()
        self.error: BaseException | None = None
        self.dead = False

    async def hold(self) -> None:
        """Opens the session and keeps it open (its context lives in this one task)."""
        try:
            async with self.client:
                self.ready.set()
                await self.closing.wait()
        except Exception as exc:
            self.error = exc
        finally:
            self.dead = True
            self.ready.set()


def _key(server: ServerConfig) -> str:
    """A session serves one declaration: a server declared anew (another URL, command or
    headers) gets a session of its own."""
    return repr((server.name, server.url, server.command, sorted(server.headers.items())))


class SessionPool:
    def __init__(self, connect: Callable[[ServerConfig], Client] = client_for) -> None:
        self._connect = connect
        self._lock = native.lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sessions: dict[str, _Session] = {}
        self._holders: set[asyncio.Task[None]] = set()

    def run(self, server: ServerConfig, operation: Operation[T], *, timeout: float) -> T:
        """``operation`` on the server's session, within ``timeout`` seconds (then
        ``TimeoutError``). A failure drops the session: the next call opens a new one."""
        # handed over without waiting (anyio's BlockingPortal waits for the loop to take
        # a task, on a lock of the hub that only the loop thread would release)
        coroutine = self._run(server, operation, timeout)
        return green.wait(asyncio.run_coroutine_threadsafe(coroutine, self._started()))

    async def _run(self, server: ServerConfig, operation: Operation[T], timeout: float) -> T:
        with anyio.fail_after(timeout):
            session = await self._session(server)
            try:
                return await operation(session.client)
            except BaseException:
                self._drop(_key(server), session)
                raise

    async def _session(self, server: ServerConfig) -> _Session:
        key = _key(server)
        session = self._sessions.get(key)
        if session is None or session.dead:
            try:
                client = self._connect(server)
            except Exception as exc:  # nothing was sent
                raise McpUnavailableError(
                    f"MCP server {server.name!r} is unavailable: {exc}"
                ) from exc
            session = _Session(client)
            self._sessions[key] = session
            holder = asyncio.get_running_loop().create_task(session.hold())
            self._holders.add(holder)  # kept: the loop holds its tasks weakly
            holder.add_done_callback(self._holders.discard)
        await session.ready.wait()
        if session.dead:
            self._drop(key, session)
            why = session.error or "the session closed"
            raise McpUnavailableError(f"MCP server {server.name!r} is unavailable: {why}")
        return session

    def _drop(self, key: str, session: _Session) -> None:
        session.closing.set()
        if self._sessions.get(key) is session:
            del self._sessions[key]

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = self._start()
            return self._loop

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.SelectorEventLoop(native.selector())
        ready = native.lock()
        ready.acquire()

        def thread() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.release)
            try:
                loop.run_forever()
            except BaseException:  # the thread must say why it ended
                log.exception("MCP loop ended", extra={"action": "mcp.loop_ended"})
                raise

        native.start_thread(thread)
        ready.acquire()  # a few milliseconds: the loop thread starting
        return loop


_POOLS: dict[int, SessionPool] = {}


def pool() -> SessionPool:
    """The process's pool, made on first use: a forked child (a prefork pool's) makes
    its own, the parent's loop thread not having followed it."""
    pid = os.getpid()
    if pid not in _POOLS:
        _POOLS.clear()
        _POOLS[pid] = SessionPool()
    return _POOLS[pid]


def run(server: ServerConfig, operation: Operation[Any], *, timeout: float) -> Any:
    return pool().run(server, operation, timeout=timeout)
