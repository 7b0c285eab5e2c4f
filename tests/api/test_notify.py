"""Outbound notifications: signed per Standard Webhooks; only a 2xx delivers; a redirect
(not followed), 5xx, 429 or no answer are retried; another 4xx is final."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.api.conftest import SECRET
from workers.notify import DeliveryError, deliver


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = 204
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.paths: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.server.paths.append(self.path)
        self.send_response(self.server.status)
        if 300 <= self.server.status < 400:
            self.send_header("location", "/elsewhere")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        del args


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[None]:
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
