"""Outbound notifications: signed per Standard Webhooks; 5xx/429/unreachable retry, 4xx is final."""

from __future__ import annotations

import threading
from collections.abc import Iterator
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

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.server.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(self.server.status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


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


def test_a_client_error_is_final(receiver: Receiver) -> None:
    receiver.status = 400
    assert deliver(receiver.url, SECRET, EVENT).status_code == 400


def test_an_unreachable_receiver_is_retried() -> None:
    with pytest.raises(DeliveryError, match="could not reach"):
        deliver("http://127.0.0.1:9/hook", SECRET, EVENT, timeout=2)
