"""Outbound notifications: signed per Standard Webhooks; only a 2xx delivers; a redirect
(not followed), 5xx, 429 or no answer are retried; another 4xx is final."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook

from airlock.workers.tasks.notify import READ_LIMIT, DeliveryError, deliver, refusal
from airlock.workers.testing import SECRET, wait_for


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = 204
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.paths: list[str] = []
        self.peers: list[tuple[str, int]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver
    protocol_version = "HTTP/1.1"  # keeps the connection open for the next request

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.server.paths.append(self.path)
        self.server.peers.append(self.client_address)
        self.send_response(self.server.status)
        if 300 <= self.server.status < 400:
            self.send_header("location", "/elsewhere")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        del args


@contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    with serving(server):
        yield server


EVENT: dict[str, Any] = {"type": "run.completed", "timestamp": "t", "data": {"id": "r"}}


def test_delivery_is_signed_and_verifiable(receiver: Receiver) -> None:
    delivery = deliver(receiver.url, SECRET, EVENT, webhook_id="msg_1")
    assert (delivery.status_code, delivery.webhook_id) == (204, "msg_1")
    headers, body = receiver.received[0]
    assert headers["webhook-id"] == "msg_1"
    assert Webhook(SECRET).verify(body, headers) == EVENT


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_are_retried(receiver: Receiver, status: int) -> None:
    receiver.status = status
    with pytest.raises(DeliveryError, match=str(status)):
        deliver(receiver.url, SECRET, EVENT)


@pytest.mark.parametrize("status", [400, 404, 410])
def test_a_client_error_is_final_and_not_delivered(receiver: Receiver, status: int) -> None:
    receiver.status = status
    with pytest.raises(DeliveryError, match=str(status)) as refused:
        deliver(receiver.url, SECRET, EVENT)
    assert refused.value.final and refused.value.status_code == status


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_and_is_retried(receiver: Receiver, status: int) -> None:
    """Issue 26, defect 13: a 3xx was recorded as delivered, and never retried."""
    receiver.status = status
    with pytest.raises(DeliveryError, match=f"{status}, a redirect") as refused:
        deliver(receiver.url, SECRET, EVENT)
    assert not refused.value.final and refused.value.status_code == status
    assert receiver.paths == ["/hook"]  # nothing sent where it pointed


def test_an_unreachable_receiver_is_retried() -> None:
    with pytest.raises(DeliveryError, match="could not reach"):
        deliver("http://127.0.0.1:9/hook", SECRET, EVENT, timeout=2)


def test_deliveries_share_one_kept_connection(receiver: Receiver) -> None:
    """Issue 26, defect 11: each delivery made a client of its own (about 27 ms of CPU),
    and a connection with it."""
    for n in range(3):
        deliver(receiver.url, SECRET, EVENT, webhook_id=f"msg_{n}")
    assert len(receiver.peers) == 3 and len(set(receiver.peers)) == 1


class RawReceiver(socketserver.ThreadingTCPServer):
    """Answers each POST with ``answer(connection)``, written by hand, and records whether
    the client hung up before the answer was written whole."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        super().__init__(("127.0.0.1", 0), _RawHandler)
        self.answer = answer
        self.hung_up: list[bool] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _RawHandler(socketserver.BaseRequestHandler):
    server: RawReceiver

    def handle(self) -> None:
        connection: socket.socket = self.request
        received = b""
        while b"\r\n\r\n" not in received:
            received += connection.recv(65536)
        head, _, body = received.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        )
        while len(body) < length:  # all of it: unread bytes would make the close a reset
            body += connection.recv(65536)
        try:
            self.server.answer(connection)
        except OSError:  # reset, broken pipe
            self.server.hung_up.append(True)
        else:
            self.server.hung_up.append(False)


def trickle(connection: socket.socket) -> None:
    """A header byte every 0.1 s for 20 s: each read is quick, the answer never ends."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nx-slow: ")
    for _ in range(200):
        connection.sendall(b"a")
        time.sleep(0.1)
    connection.sendall(b"\r\ncontent-length: 0\r\n\r\n")


def test_an_attempt_ends_by_its_deadline_however_the_receiver_trickles() -> None:
    """Issue 26, defect 11: httpx's timeouts bound each read, not the attempt: a receiver
    that trickles a byte at a time held a worker for as long as it pleased."""
    server = RawReceiver(trickle)
    with serving(server):
        with pytest.raises(DeliveryError, match="did not answer within 1 s"):
            deliver(server.url, SECRET, EVENT, timeout=1)
        # the connection was closed: the receiver's next byte finds no one
        assert wait_for("the receiver to be cut off", lambda: server.hung_up) == [True]


HUGE = 256 * 1024 * 1024


def huge_answer(connection: socket.socket) -> None:
    connection.sendall(f"HTTP/1.1 200 OK\r\ncontent-length: {HUGE}\r\n\r\n".encode())
    chunk = b"x" * 65536
    for _ in range(HUGE // len(chunk)):
        connection.sendall(chunk)


def test_the_answer_is_read_no_further_than_a_few_kib() -> None:
    """Issue 26, defect 12: the answer was read whole into memory (a 400 MiB answer grew
    a worker by 805 MiB). The delivery is decided by the status; the rest is not read,
    and the receiver finds the connection closed long before it has written it all."""
    assert READ_LIMIT <= 16384
    server = RawReceiver(huge_answer)
    with serving(server):
        assert deliver(server.url, SECRET, EVENT).status_code == 200
        assert wait_for("the receiver to be done", lambda: server.hung_up) == [True]


def test_a_failed_delivery_does_not_name_the_receivers_credentials() -> None:
    """Attack review: a failed delivery's error, stored in the run's ``notify_failed``
    event (which every API client and approver reads), held the whole notify URL: its
    password, a token in its query or a secret path."""
    secret_url = "http://hook:s3cret@127.0.0.1:9/services/s3cret?token=s3cret"
    with pytest.raises(DeliveryError) as failed:
        deliver(secret_url, SECRET, EVENT, timeout=2)
    assert "s3cret" not in str(failed.value) and "http://127.0.0.1:9" in str(failed.value)
    for status in (302, 404, 500):
        refused = refusal(secret_url, status)
        assert refused is not None and "s3cret" not in str(refused)
        assert f"http://127.0.0.1:9 answered {status}" in str(refused)
