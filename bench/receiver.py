"""A notification receiver in a process of its own, for the benchmarks (issue 46): a real
HTTP server (keep-alive, as a receiver behind a proxy would) that counts what it
receives by type, and answers as ``--mode`` says:

- ``fast``: 204 at once;
- ``slow``: 204 after 2 s;
- ``trickle``: a header byte every 0.5 s, for 60 s (no read ever waits long; the answer
  never ends within a delivery's deadline).

``GET /`` answers the counts (JSON). ``start(mode)`` runs one and returns its process and
the URL to notify.

    .venv/bin/python -m bench.receiver --port 9999 --mode fast
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx

from airlock.workers.testing import Process, free_port, wait_for

MODES = ("fast", "slow", "trickle")


class Receiver(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode: ClassVar[str] = "fast"
    counts: ClassVar[Counter[str]] = Counter()

    def do_POST(self) -> None:
        event = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.counts[event.get("type", "?")] += 1
        if self.mode == "trickle":
            self._trickle()
            return
        if self.mode == "slow":
            time.sleep(2.0)
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _trickle(self) -> None:
        connection: socket.socket = self.connection
        try:
            connection.sendall(b"HTTP/1.1 200 OK\r\nx-slow: ")
            for _ in range(120):
                connection.sendall(b"a")
                time.sleep(0.5)
            connection.sendall(b"\r\ncontent-length: 0\r\n\r\n")
        except OSError:  # the sender's deadline cut it off
            self.close_connection = True

    def do_GET(self) -> None:
        answer = json.dumps(self.counts).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024


def start(mode: str) -> tuple[Process, str]:
    """A receiver process in ``mode``; its process and the URL to notify."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.receiver", "--port", str(port), "--mode", mode]
    log = Path(tempfile.mkdtemp(prefix="airlock-receiver-")) / "receiver.log"
    process = Process(f"receiver-{mode}", argv, dict(os.environ), log).start()
    root = f"http://127.0.0.1:{port}/"
    wait_for("the receiver", lambda: _up(root), timeout=30)
    return process, f"{root}hooks"


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=MODES, default="fast")
    args = parser.parse_args()
    Receiver.mode = args.mode
    _Server(("127.0.0.1", args.port), Receiver).serve_forever()


if __name__ == "__main__":
    main()
