"""The OIDC issuer's signing keys (its JWKS), as ``TokenVerifier`` needs them: kept
``LIFESPAN`` seconds, fetched by one request at a time and never under a lock another
request waits on, at most once per ``COOLDOWN`` whether the last fetch worked or not,
and within ``FETCH_TIMEOUT`` seconds in all (an answer that trickles in, headers
included, is cut off there).

PyJWT's ``PyJWKClient`` fetches under the lock every lookup takes and starts its
cooldown only after a fetch that worked: tokens with made-up key ids, sent while the
issuer's keys endpoint hangs, held every request that verifies a token (issue 26). The
keys are parsed and looked up with PyJWT's ``PyJWKSet`` and ``PyJWK``.

Each fetch that works replaces the keys: one the issuer dropped is refused from the
fetch that finds it gone (at most ``LIFESPAN`` after the last, sooner when a token
names a key not known), even when the issuer lists no key at all any more."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import httpx
from jwt import PyJWK, PyJWKSet
from jwt.exceptions import PyJWKSetError, PyJWTError

from airlock.loop.errors import AirlockError
from airlock.providers.http import client
from airlock.providers.transport import DEADLINE as WITHIN

LIFESPAN = 300.0
"""Seconds a fetched key set is used before it is fetched again (a known key keeps
verifying, from the set it was in, until a fetch works)."""
COOLDOWN = 30.0
"""Seconds after any fetch, worked or failed, before a token whose key is not known
(or an old set) makes another."""
FETCH_TIMEOUT = 2.0
"""Seconds a fetch may take, its discovery included."""
MAX_SIZE = 256 * 1024
"""Bytes read of an answer from the issuer, at most."""


class KeysUnavailableError(AirlockError):
    """The issuer's keys cannot be had now (503): none were fetched yet, or the last
    fetch failed."""


class UnknownKeyError(AirlockError):
    """No signing key of the issuer, as last fetched, has this id (401)."""


class IssuerKeys:
    def __init__(
        self,
        issuer: str,
        jwks_url: str | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._issuer = issuer
        self._jwks_url = jwks_url
        self._clock = clock
        self._lifespan, self._cooldown, self._timeout = LIFESPAN, COOLDOWN, FETCH_TIMEOUT
        self._lock = threading.Lock()  # guards what follows; never held while fetching
        self._fetched = threading.Condition(self._lock)
        self._keys: dict[str, PyJWK] | None = None
        self._fetched_at = 0.0
        self._tried_at: float | None = None
        self._failure: str | None = None
        self._fetching = False

    def key(self, kid: str) -> PyJWK:
        """The signing key ``kid``. Fetches the keys when they are old or lack it,
        unless a fetch is in flight or was tried within the cooldown: then it answers
        from the keys it has (only before the first keys does it wait for the fetch in
        flight). Blocking. Raises ``UnknownKeyError`` or ``KeysUnavailableError``."""
        with self._lock:
            if self._fetching and self._keys is None:
                self._fetched.wait_for(lambda: not self._fetching, 2 * self._timeout)
            known = self._known(kid)
            now = self._clock()
            if known is not None and now - self._fetched_at < self._lifespan:
                return known
            cooling = self._tried_at is not None and now - self._tried_at < self._cooldown
            if self._fetching or cooling:
                if known is not None:
                    return known
                raise self._refusal(kid)
            self._fetching, self._tried_at = True, now
        keys: dict[str, PyJWK] | None = None
        failure: str | None = "the fetch was interrupted"
        try:
            keys, failure = self._fetch(), None
        except KeysUnavailableError as exc:
            failure = str(exc)
            if known is None:
                raise
            return known  # an old set's key keeps verifying until a fetch works
        finally:
            with self._lock:
                if keys is not None:
                    self._keys, self._fetched_at = keys, self._clock()
                self._fetching, self._failure = False, failure
                self._fetched.notify_all()
        with self._lock:
            found = self._known(kid)
            if found is None:
                raise self._refusal(kid)
            return found

    def _known(self, kid: str) -> PyJWK | None:
        return None if self._keys is None else self._keys.get(kid)

    def _refusal(self, kid: str) -> Exception:
        if self._keys is None or self._failure is not None:
            return KeysUnavailableError(self._failure or "they are being fetched")
        return UnknownKeyError(f"no key of the issuer has the id {kid!r}")

    def _fetch(self) -> dict[str, PyJWK]:
        """The signing keys (``use`` sig or unset) by id, as the issuer serves them now,
        within ``FETCH_TIMEOUT`` in all, discovery included: each request goes through
        the process's one outbound client with what is left of it as its deadline (the
        transport's ``DEADLINE``: httpx's own timeouts bound each read alone)."""
        ends = time.monotonic() + self._timeout
        url = self._jwks_url
        if url is None:
            where = self._issuer.rstrip("/") + "/.well-known/openid-configuration"
            found = _get(where, ends - time.monotonic()).get("jwks_uri")
            if not isinstance(found, str):
                raise KeysUnavailableError(f"{where} names no jwks_uri")
            url = self._jwks_url = found
        return _signing_keys(url, _get(url, ends - time.monotonic()))


def _signing_keys(url: str, answer: dict[str, object]) -> dict[str, PyJWK]:
    """The signing keys (``use`` sig or unset) of a JWK set, by id. A set is the issuer's
    whole word on its keys, an empty one too: a key it no longer lists is no longer
    trusted. (``PyJWKSet`` refuses a set with no key it can use, and taking that as a
    failed fetch kept every key of the set before verifying.) Raises
    ``KeysUnavailableError`` for an answer that is no JWK set."""
    listed = answer.get("keys")
    if not isinstance(listed, list):
        raise KeysUnavailableError(f"{url} holds no JWK set (no 'keys' list)")
    try:
        keys = PyJWKSet(listed).keys
    except PyJWKSetError:  # none of them (if any) is a key PyJWT can use: none is trusted
        keys = []
    except PyJWTError as exc:
        raise KeysUnavailableError(f"{url}: {exc}") from exc
    return {k.key_id: k for k in keys if k.key_id and k.public_key_use in ("sig", None)}


def _get(url: str, seconds: float) -> dict[str, object]:
    """The JSON object at ``url``, of at most ``MAX_SIZE`` bytes, within ``seconds``."""
    if seconds <= 0:
        raise KeysUnavailableError(f"{url}: no time left within {FETCH_TIMEOUT} s")
    try:
        with client().stream(
            "GET", url, timeout=seconds, follow_redirects=False, extensions={WITHIN: seconds}
        ) as answer:
            answer.raise_for_status()
            body = bytearray()
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) > MAX_SIZE:
                    raise KeysUnavailableError(f"{url} answers more than {MAX_SIZE} bytes")
        data = json.loads(body)
    except httpx.TimeoutException as exc:
        raise KeysUnavailableError(f"{url} took over {seconds:.3g} s") from exc
    except (httpx.HTTPError, ValueError) as exc:
        raise KeysUnavailableError(f"{url}: {exc}") from exc
    if not isinstance(data, dict):
        raise KeysUnavailableError(f"{url} answers no JSON object")
    return data
