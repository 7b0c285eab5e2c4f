"""The one HTTP exchange a provider makes, over httpx, with typed errors: retryable
(429, 408, 409, 425, 5xx, timeouts, unreachable; with the provider's ``retry-after``)
or not. Retries are not done here: the worker's backoff handles them.

Every call goes through one ``httpx.Client`` per process (``client()``): its pool keeps
connections alive between calls, so a model call does not pay a new TCP and TLS
handshake (nor a new client's set-up, its TLS context: CPU, see BENCHMARKS.md), and
concurrent calls (segments of a gevent worker) each take a connection of their own.
The timeout is per call.

The client sends on urllib3's pool (``airlock.providers.transport.Urllib3Transport``), not
httpcore's, whose CPU per call grows with the calls in flight through one client under
gevent (measured by ``bench.http_pool``; the figures are in BENCHMARKS.md, W2)."""

from __future__ import annotations

import json
import os
import threading

import httpx
from pydantic import JsonValue

from airlock.loop.errors import ModelError
from airlock.loop.messages import JsonObject
from airlock.providers.transport import Urllib3Transport

RETRYABLE = {408, 409, 425, 429}

KEEPALIVE = 256
LIMITS = httpx.Limits(
    max_connections=None, max_keepalive_connections=KEEPALIVE, keepalive_expiry=60
)
"""As many connections as calls in flight (a worker's concurrency bounds them); up to
256 kept alive between calls (per origin), for 60 s idle at most. The transport keeps
the same; these are for httpx's own, which a proxy from the environment
(``HTTPS_PROXY``) still goes through."""

_kept: dict[int, httpx.Client] = {}
"""This process's client, by pid."""
_lock = threading.Lock()


def client() -> httpx.Client:
    """This process's client. A forked child (a prefork pool's) makes its own: the
    parent's connections are not shared across processes."""
    pid = os.getpid()
    kept = _kept.get(pid)
    if kept is not None:
        return kept
    with _lock:
        if pid not in _kept:
            _kept.clear()  # a parent's, inherited by fork: never used here
            transport = Urllib3Transport(keepalive=KEEPALIVE)
            _kept[pid] = httpx.Client(limits=LIMITS, transport=transport)
        return _kept[pid]


def post(url: str, body: JsonObject, headers: dict[str, str], timeout: float) -> JsonObject:
    try:
        response = client().post(url, json=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:  # timeouts, refused and reset connections
        raise ModelError(f"could not reach the model at {url}: {exc}", retryable=True) from exc
    if response.is_error:
        raise _http_error(response)
    try:
        parsed: JsonObject = response.json()
    except ValueError as exc:
        raise ModelError(f"the model at {url} answered with invalid JSON: {exc}") from exc
    return parsed


def _http_error(response: httpx.Response) -> ModelError:
    try:
        payload = response.json() if response.content else {}
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        detail = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        detail = response.reason_phrase
    code = response.status_code
    retryable = code in RETRYABLE or code >= 500
    return ModelError(
        f"model provider answered {code}: {detail}",
        retryable=retryable,
        retry_after=_retry_after(response.headers.get("retry-after")) if retryable else None,
    )


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def parse_arguments(raw: JsonValue) -> tuple[JsonObject, str | None]:
    """A call's arguments as the loop takes them, or why they cannot be (fed back to
    the model as the call's error)."""
    if isinstance(raw, dict):
        return raw, None
    if not isinstance(raw, str):
        return {}, f"the model sent arguments that are not a JSON object: {raw!r}"
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        return {}, f"the model sent arguments that are not valid JSON ({exc}): {raw[:200]!r}"
    if not isinstance(parsed, dict):
        return {}, f"the model sent arguments that are not a JSON object: {raw[:200]!r}"
    return parsed, None
