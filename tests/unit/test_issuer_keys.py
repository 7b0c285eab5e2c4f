"""The issuer's keys (``IssuerKeys``) against a real local issuer whose keys endpoint
the test can hold (issue 26, defect 8): one fetch at a time, a cooldown after a fetch
that worked and after one that failed, and no lookup of a known key waits on a fetch.
The clock is the test's; a fetch in flight is held by the issuer until released."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from jwt import PyJWK

from airlock.workers.http import issuer_keys
from airlock.workers.http.issuer_keys import IssuerKeys, KeysUnavailableError, UnknownKeyError
from tests.issuer import Issuer

GUARD = 30.0
"""Seconds before a test that deadlocked gives up (never reached when it passes)."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as issuer:
        yield issuer


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as pool:
        yield pool


def held_fetch(
    pool: ThreadPoolExecutor, issuer: Issuer, keys: IssuerKeys, kid: str
) -> Future[PyJWK]:
    """A lookup of ``kid`` whose fetch the issuer holds, once it is in flight."""
    issuer.hold()
    lookup = pool.submit(keys.key, kid)
    assert issuer.fetching.wait(GUARD)
    return lookup


def test_an_unknown_key_fetches_again_only_after_the_cooldown(issuer: Issuer) -> None:
    clock = Clock()
    keys = IssuerKeys(issuer.url, None, clock=clock)
    assert keys.key(issuer.kid).key_id == issuer.kid
    assert issuer.fetches == 1
    for _ in range(3):
        with pytest.raises(UnknownKeyError, match="made-up"):
            keys.key("made-up")
    assert issuer.fetches == 1
    clock.now += issuer_keys.COOLDOWN
    with pytest.raises(UnknownKeyError):
        keys.key("made-up")
    with pytest.raises(UnknownKeyError):
        keys.key("made-up")
    assert issuer.fetches == 2
    assert keys.key(issuer.ec_kid).algorithm_name == "ES256"


def test_a_failed_fetch_starts_the_cooldown_too(
    issuer: Issuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(issuer_keys, "FETCH_TIMEOUT", 0.2)
    clock = Clock()
    keys = IssuerKeys(issuer.url, f"{issuer.url}/jwks", clock=clock)
    issuer.hold()  # every fetch hangs past its timeout
    with pytest.raises(KeysUnavailableError, match="jwks"):
        keys.key(issuer.kid)
    assert issuer.fetches == 1
    for kid in (issuer.kid, "made-up"):
        with pytest.raises(KeysUnavailableError, match="jwks"):
            keys.key(kid)
    assert issuer.fetches == 1
    issuer.release()
    clock.now += issuer_keys.COOLDOWN
    keys._timeout = 30.0  # the issuer answers now: however loaded the machine, in time
    assert keys.key(issuer.kid).key_id == issuer.kid
    assert issuer.fetches == 2


def test_a_known_key_never_waits_on_a_fetch_in_flight(
    issuer: Issuer, pool: ThreadPoolExecutor
) -> None:
    clock = Clock()
    keys = IssuerKeys(issuer.url, None, clock=clock)
    keys.key(issuer.kid)
    clock.now += issuer_keys.COOLDOWN
    unknown = held_fetch(pool, issuer, keys, "made-up")
    # while it is held: a known key answers, an unknown one is refused, nothing fetches
    assert keys.key(issuer.kid).key_id == issuer.kid
    with pytest.raises(UnknownKeyError):
        keys.key("another-made-up")
    assert issuer.fetches == 2 and not unknown.done()
    issuer.release()
    with pytest.raises(UnknownKeyError):
        unknown.result(GUARD)


def test_an_old_key_set_is_fetched_again_and_used_while_it_is(
    issuer: Issuer, pool: ThreadPoolExecutor
) -> None:
    clock = Clock()
    keys = IssuerKeys(issuer.url, None, clock=clock)
    keys.key(issuer.kid)
    clock.now += issuer_keys.LIFESPAN
    refresh = held_fetch(pool, issuer, keys, issuer.kid)
    assert keys.key(issuer.ec_kid).key_id == issuer.ec_kid  # from the old set, at once
    assert issuer.fetches == 2 and not refresh.done()
    issuer.release()
    assert refresh.result(GUARD).key_id == issuer.kid


def test_a_key_the_issuer_dropped_is_refused_from_the_next_refresh(issuer: Issuer) -> None:
    clock = Clock()
    keys = IssuerKeys(issuer.url, None, clock=clock)
    assert keys.key(issuer.ec_kid).key_id == issuer.ec_kid
    issuer.dropped.add(issuer.ec_kid)
    clock.now += issuer_keys.LIFESPAN
    with pytest.raises(UnknownKeyError, match=issuer.ec_kid):
        keys.key(issuer.ec_kid)
    assert keys.key(issuer.kid).key_id == issuer.kid and issuer.fetches == 2


def test_a_token_naming_a_new_key_refreshes_and_drops_the_old_at_once(issuer: Issuer) -> None:
    """A key rotated out before ``LIFESPAN``: the first token of the new key fetches
    (after the cooldown), and the set it brings no longer holds the old one."""
    clock = Clock()
    keys = IssuerKeys(issuer.url, None, clock=clock)
    keys.key(issuer.kid)
    issuer.dropped.add(issuer.kid)
    clock.now += issuer_keys.COOLDOWN
    assert keys.key(issuer.ec_kid).key_id == issuer.ec_kid  # known: no fetch yet
    with pytest.raises(UnknownKeyError):
        keys.key("rotated-in")  # unknown: fetches
    assert issuer.fetches == 2
    with pytest.raises(UnknownKeyError, match=issuer.kid):
        keys.key(issuer.kid)


@pytest.mark.parametrize("left", ["no key", "only keys of an unknown kind"])
def test_an_issuer_that_lists_no_usable_key_any_more_leaves_none_trusted(
    issuer: Issuer, left: str
) -> None:
    """Found in issue 42: a JWK set PyJWT could use no key of (an empty one included)
    was taken for a failed fetch, and every key of the set before kept verifying."""
    clock = Clock()
    keys = IssuerKeys(issuer.url, None, clock=clock)
    keys.key(issuer.kid)
    issuer.dropped |= {issuer.kid, issuer.ec_kid}
    if left != "no key":
        issuer.unusable.append({"kty": "made-up", "kid": "odd-1", "use": "sig"})
    clock.now += issuer_keys.LIFESPAN
    for kid in (issuer.kid, issuer.ec_kid, "odd-1"):
        with pytest.raises(UnknownKeyError):
            keys.key(kid)
    assert issuer.fetches == 2


def test_an_answer_that_is_no_key_set_keeps_the_keys_until_a_fetch_works(
    issuer: Issuer,
) -> None:
    """Not an answer about the keys (no ``keys`` list): a failed fetch, as before."""
    clock = Clock()
    keys = IssuerKeys(issuer.url, None, clock=clock)
    keys.key(issuer.kid)
    serve = issuer.jwks
    issuer.jwks = lambda: {"error": "maintenance"}  # type: ignore[method-assign]
    clock.now += issuer_keys.LIFESPAN
    assert keys.key(issuer.kid).key_id == issuer.kid
    with pytest.raises(KeysUnavailableError, match="no 'keys' list"):
        keys.key("made-up")
    issuer.jwks = serve  # type: ignore[method-assign]
    issuer.dropped.add(issuer.kid)
    clock.now += issuer_keys.COOLDOWN
    with pytest.raises(UnknownKeyError):
        keys.key(issuer.kid)


def test_lookups_before_the_first_keys_fetch_them_once(
    issuer: Issuer, pool: ThreadPoolExecutor
) -> None:
    keys = IssuerKeys(issuer.url, None, clock=Clock())
    first = held_fetch(pool, issuer, keys, issuer.kid)
    second = pool.submit(keys.key, issuer.ec_kid)
    issuer.release()
    assert first.result(GUARD).key_id == issuer.kid
    assert second.result(GUARD).key_id == issuer.ec_kid
    assert issuer.fetches == 1


class Trickle:
    """A keys endpoint that sends its answer a byte at a time, each byte well within
    httpx's read timeout, until the client hangs up; it counts the bytes it sent."""

    ANSWER = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n"
        b'{"keys": []}'
    )

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sent = 0
        self.hung_up = threading.Event()
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/jwks"

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.recv(65536)
            for byte in self.ANSWER:
                if self.stop.wait(0.05):
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    break
                self.sent += 1
            self.hung_up.set()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def test_a_fetch_whose_answer_trickles_in_ends_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found in the second review: the deadline was checked between chunks of the body
    only, so an answer whose headers trickled in kept the fetch going (36 s against its
    2 s). Now the fetch gives up while the answer is still coming."""
    monkeypatch.setattr(issuer_keys, "FETCH_TIMEOUT", 0.5)
    trickle = Trickle()
    try:
        keys = IssuerKeys("https://issuer.test", trickle.url)
        with pytest.raises(KeysUnavailableError, match="took over"):
            keys.key("any")
        # it gave up while the headers were still coming
        assert trickle.sent < Trickle.ANSWER.index(b"\r\n\r\n")
    finally:
        trickle.close()
