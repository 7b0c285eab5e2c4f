"""A local OIDC issuer for tests: an RSA and an EC key the test makes, its OpenID
configuration and JWKS served over HTTP by threads on 127.0.0.1 (no network), and tokens
it signs. ``hold()`` makes its keys endpoint hang until ``release()``, with an event
set as each held fetch arrives, so a test can force what happens while a fetch is in
flight."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

AUDIENCE = "airlock"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Issuer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.key = new_key()
        self.kid = "test-key-1"
        self.ec_key = ec.generate_private_key(ec.SECP256R1())
        self.ec_kid = "test-ec-1"
        self.fetches = 0
        self.dropped: set[str] = set()
        """Key ids its JWKS no longer lists."""
        self.unusable: list[dict[str, Any]] = []
        """JWKs it lists that no one can verify with (of an unknown kind)."""
        self.fetching = threading.Event()
        """Set when a fetch of the keys arrives while they are held."""
        self._released = threading.Event()
        self._released.set()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> Issuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.shutdown()
        self.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up on a held fetch is no error of the test's."""

    def hold(self) -> None:
        """Fetches of the keys hang from now until ``release()``."""
        self.fetching.clear()
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def jwks(self) -> dict[str, Any]:
        rsa_jwk: dict[str, Any] = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        ec_jwk: dict[str, Any] = ECAlgorithm.to_jwk(self.ec_key.public_key(), as_dict=True)
        keys = [
            rsa_jwk | {"kid": self.kid, "alg": "RS256", "use": "sig"},
            ec_jwk | {"kid": self.ec_kid, "alg": "ES256", "use": "sig"},
        ]
        return {"keys": [k for k in keys if k["kid"] not in self.dropped] + self.unusable}

    def settings(self) -> dict[str, str]:
        """The API's settings for this issuer (roles in the ``roles`` claim)."""
        return {"oidc_issuer": self.url, "oidc_audience": AUDIENCE}

    def token(
        self,
        sub: str,
        roles: list[str] | None = None,
        *,
        lifetime: float = 300,
        key: Any = None,
        kid: str | None = None,
        algorithm: str = "RS256",
        **claims: Any,
    ) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "exp": now + int(lifetime),
            "roles": roles or [],
        }
        payload.update(claims)
        headers = {"kid": kid or self.kid}
        return jwt.encode(payload, key or self.key, algorithm=algorithm, headers=headers)

    def bearer(self, sub: str, roles: list[str] | None = None, **claims: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(sub, roles, **claims)}"}


class _Handler(BaseHTTPRequestHandler):
    server: Issuer

    def do_GET(self) -> None:
        if self.path == "/.well-known/openid-configuration":
            body: dict[str, Any] = {
                "issuer": self.server.url,
                "jwks_uri": f"{self.server.url}/jwks",
            }
        elif self.path == "/jwks":
            self.server.fetches += 1
            if not self.server._released.is_set():
                self.server.fetching.set()
                self.server._released.wait()
            body = self.server.jwks()
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        del args
