"""A TCP proxy in front of a real server that a test can cut: every connection through
it is closed at once (``drop``), as a load balancer's restart or a lost network does."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress


class CuttingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.requests: list[bytes] = []
        """What the clients sent, as it was read (a request's line and headers come
        in one read)."""
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self._lock:
                self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, request: bool) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                if request:
                    self.requests.append(data)
                sink.sendall(data)
        for s in (source, sink):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        if not request:  # the other pump has ended or ends now: both are done with them
            return
        with self._lock:
            self._open = [s for s in self._open if s not in (source, sink)]
        for s in (source, sink):
            s.close()

    def drop(self) -> None:
        """Cut every connection open now."""
        with self._lock:
            cut, self._open = self._open, []
        for s in cut:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
        self.drop()
