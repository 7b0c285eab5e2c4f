"""The providers' urllib3 transport behaves as httpx's own: the same exceptions for the
same failures, keep-alive, a dropped or expired kept connection replaced, per-call
timeouts. Each failure is played by a raw socket server on this machine."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from ipaddress import ip_address
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from urllib3.exceptions import ConnectTimeoutError

from airlock.loop import ModelError
from airlock.providers import OpenAIModel, transport
from airlock.providers.transport import Urllib3Transport
from airlock.workers.testing import wait_for

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class RawServer:
    """Accepts connections and hands each to ``serve`` in a thread of its own; records
    each connection's peer address (one per TCP connection)."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self._serve = serve
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.peers: list[tuple[str, int]] = []
        self.closed = threading.Semaphore(0)
        """Released as each connection is closed by this side."""
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._listener.accept()
            except OSError:
                return
            self.peers.append(peer)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            self._serve(conn)
        self.closed.release()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


def read_request(conn: socket.socket) -> bytes:
    """One request's head and body (by its content-length), or b"" at EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
         if line.startswith(b"content-length:")), 0,
    )  # fmt: skip
    while len(body) < length:
        body += conn.recv(65536)
    return head


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], RawServer]]:
    servers: list[RawServer] = []

    def start(behaviour: Callable[[socket.socket], None]) -> RawServer:
        servers.append(RawServer(behaviour))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def both() -> list[httpx.BaseTransport]:
    return [httpx.HTTPTransport(), Urllib3Transport()]


def closes_without_answering(conn: socket.socket) -> None:
    read_request(conn)


def never_answers(conn: socket.socket) -> None:
    read_request(conn)
    conn.recv(1)  # until the client gives up


def breaks_off_the_body(conn: socket.socket) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{")


def answers_garbage(conn: socket.socket) -> None:
    read_request(conn)
    conn.sendall(b"this is not HTTP\r\n\r\n")


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        (closes_without_answering, httpx.RemoteProtocolError),
        (never_answers, httpx.ReadTimeout),
        (breaks_off_the_body, httpx.RemoteProtocolError),
        (answers_garbage, httpx.RemoteProtocolError),
    ],
)
def test_failures_raise_what_httpx_raises(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
    behaviour: Callable[[socket.socket], None],
    expected: type[httpx.HTTPError],
) -> None:
    server = serve(behaviour)
    raised = []
    for sender in both():
        with httpx.Client(transport=sender) as client, pytest.raises(httpx.HTTPError) as info:
            client.post(server.url, json={}, timeout=0.5)
        raised.append(type(info.value))
    assert raised == [expected, expected]


def test_a_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        for sender in both():
            with httpx.Client(transport=sender) as client, pytest.raises(httpx.ConnectError):
                client.post(url, json={}, timeout=2)


def test_a_connect_timeout_is_httpx_s() -> None:
    """Not made on the wire (it needs an address that drops packets): the mapping."""
    error = transport._httpx_error(ConnectTimeoutError("timed out"))
    assert error is httpx.ConnectTimeout


def test_a_provider_that_does_not_answer_in_time_is_retryable(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(never_answers)
    model = OpenAIModel(model="m", base_url=server.url, timeout=0.3)
    with pytest.raises(ModelError, match="could not reach") as info:
        model.complete([], [])
    assert info.value.retryable


def keeps_alive(conn: socket.socket) -> None:
    while read_request(conn):
        conn.sendall(OK)


def answers_once(conn: socket.socket) -> None:
    """Answers as if it kept the connection, then closes it (an idle timeout)."""
    read_request(conn)
    conn.sendall(OK)


def test_calls_share_a_connection(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(keeps_alive)
    with httpx.Client(transport=Urllib3Transport()) as client:
        for _ in range(3):
            assert client.post(server.url, json={}).json() == {}
    assert len(server.peers) == 1


def test_a_connection_the_server_closed_is_replaced(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(answers_once)
    with httpx.Client(transport=Urllib3Transport()) as client:
        assert client.post(server.url, json={}).status_code == 200
        assert server.closed.acquire(timeout=5)  # its FIN is on its way over loopback
        assert client.post(server.url, json={}).status_code == 200
    assert len(server.peers) == 2


def test_a_connection_idle_past_the_expiry_is_replaced(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(keeps_alive)
    with httpx.Client(transport=Urllib3Transport()) as client:
        client.post(server.url, json={})
        client.post(server.url, json={})
        assert len(server.peers) == 1
        monkeypatch.setattr(transport, "KEEPALIVE_EXPIRY", 0.0)
        client.post(server.url, json={})
    assert len(server.peers) == 2


def big_body(conn: socket.socket) -> None:
    while read_request(conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n" + b"x" * 1_000_000)


def test_an_answer_not_read_to_its_end_does_not_keep_its_connection(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    server = serve(big_body)
    with httpx.Client(transport=Urllib3Transport()) as client:
        with client.stream("POST", server.url, json={}) as response:
            next(response.iter_raw(10))
        assert len(client.post(server.url, json={}).content) == 1_000_000
        assert len(client.post(server.url, json={}).content) == 1_000_000
    assert len(server.peers) == 2  # the broken-off one, then one kept for both


def test_headers_query_and_body_go_as_given(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    heads: list[bytes] = []

    def records(conn: socket.socket) -> None:
        heads.append(read_request(conn))
        conn.sendall(OK)

    server = serve(records)
    with httpx.Client(transport=Urllib3Transport()) as client:
        client.post(f"{server.url}/v1/x?a=1&b=%20", json={}, headers={"x-k": "v"})
    lines = heads[0].decode().split("\r\n")
    assert lines[0] == "POST /v1/x?a=1&b=%20 HTTP/1.1"
    fields = [line.split(": ", 1)[0].lower() for line in lines[1:]]
    assert fields.count("host") == 1 and fields.count("content-length") == 1
    assert "x-k: v" in lines[1:]
    assert "user-agent" in fields and "urllib3" not in heads[0].decode().lower()


def certificate(tmp: Path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate for ``name`` (an IP address) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip_address(name))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / f"{name}.pem", tmp / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def tls(cert: tuple[Path, Path], handshakes: list[int]) -> Callable[[socket.socket], None]:
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(*cert)

    def serve(conn: socket.socket) -> None:
        with server_side.wrap_socket(conn, server_side=True) as wrapped:
            handshakes.append(1)
            keeps_alive(wrapped)

    return serve


def test_tls_one_handshake_per_connection_verified_against_the_trust_given(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], tmp_path: Path
) -> None:
    cert = certificate(tmp_path, "127.0.0.1")
    handshakes: list[int] = []
    server = serve(tls(cert, handshakes))
    url = server.url.replace("http://", "https://")
    trust = ssl.create_default_context(cafile=str(cert[0]))
    with httpx.Client(transport=Urllib3Transport(ssl_context=trust)) as client:
        for _ in range(3):
            assert client.post(url, json={}).json() == {}
    assert len(handshakes) == 1 and len(server.peers) == 1
    # the default trust (certifi's roots, as httpx's) refuses a certificate it does not know
    for sender in both():
        with httpx.Client(transport=sender) as client, pytest.raises(httpx.ConnectError):
            client.post(url, json={})


def test_tls_a_certificate_for_another_address_is_refused(
    serve: Callable[[Callable[[socket.socket], None]], RawServer], tmp_path: Path
) -> None:
    cert = certificate(tmp_path, "127.0.0.2")  # trusted, but not 127.0.0.1's
    server = serve(tls(cert, []))
    url = server.url.replace("http://", "https://")
    trust = ssl.create_default_context(cafile=str(cert[0]))
    senders = [httpx.HTTPTransport(verify=trust), Urllib3Transport(ssl_context=trust)]
    for sender in senders:
        with httpx.Client(transport=sender) as client, pytest.raises(httpx.ConnectError):
            client.post(url, json={})


def test_a_get_goes_without_a_body(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    heads: list[bytes] = []

    def records(conn: socket.socket) -> None:
        heads.append(read_request(conn))
        conn.sendall(OK)

    server = serve(records)
    with httpx.Client(transport=Urllib3Transport()) as client:
        assert client.get(server.url).json() == {}
    assert b"content-length" not in heads[0].lower()


def trickles_its_head(conn: socket.socket) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nx-slow: ")
    for _ in range(200):  # a byte every 50 ms: no single read ever waits long
        conn.sendall(b"a")
        time.sleep(0.05)


def trickles_its_body(conn: socket.socket) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")  # no length: the body ends when the server closes
    for _ in range(200):
        conn.sendall(b"a")
        time.sleep(0.05)


@pytest.mark.parametrize("behaviour", [trickles_its_head, trickles_its_body])
def test_a_deadline_ends_the_whole_exchange_however_the_answer_trickles(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
    behaviour: Callable[[socket.socket], None],
) -> None:
    """A read timeout bounds each read: an answer that comes a byte at a time meets none.
    The ``DEADLINE`` extension bounds the exchange: its socket is shut down when it passes
    (the server's next byte finds it closed) and the caller gets ``ReadTimeout``."""
    server = serve(behaviour)
    client = httpx.Client(transport=Urllib3Transport())
    with pytest.raises(httpx.ReadTimeout, match="deadline"):
        client.get(server.url, timeout=5, extensions={transport.DEADLINE: 0.5})
    assert server.closed.acquire(timeout=5)  # the server was cut off, long before 10 s


def test_an_exchange_within_its_deadline_keeps_its_connection(
    serve: Callable[[Callable[[socket.socket], None]], RawServer],
) -> None:
    def answers_twice(conn: socket.socket) -> None:
        for _ in range(2):
            read_request(conn)
            conn.sendall(OK)

    server = serve(answers_twice)
    client = httpx.Client(transport=Urllib3Transport())
    for _ in range(2):
        answer = client.get(server.url, extensions={transport.DEADLINE: 0.3})
        assert answer.status_code == 200
        # the deadline passes, and its watchdog fires on nothing the next exchange uses
        wait_for("the deadline to pass", lambda: not transport._watchdog._due)
    assert len(server.peers) == 1
