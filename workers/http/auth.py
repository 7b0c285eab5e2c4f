"""Who is calling: the API token, an OIDC/JWT bearer token, or a named approval client's
webhook signature, verified into a ``Principal`` (or the trusted API-token caller)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from jwt import PyJWK
from jwt.exceptions import (
    ExpiredSignatureError,
    ImmatureSignatureError,
    InvalidAudienceError,
    InvalidIssuerError,
    InvalidSignatureError,
    MissingRequiredClaimError,
    PyJWTError,
)
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from airlock.workers.http.guard import signed_headers, token_matches
from airlock.workers.http.issuer_keys import IssuerKeys, KeysUnavailableError, UnknownKeyError
from airlock.workers.http.metrics import Metrics
from airlock.workers.http.problems import ProblemError
from airlock.workers.service.principals import Principal, check_name
from airlock.workers.service.settings import Settings


def _unauthorised(detail: str) -> ProblemError:
    return ProblemError(401, "Unauthorized", detail)


class TokenVerifier:
    """OIDC / JWT bearer tokens of one issuer: signed by a key of its JWKS (kept and
    fetched by ``IssuerKeys``), for the configured audience, within ``exp`` / ``nbf``; the
    principal is the ``sub``, its roles the configured claim (a dotted path; a list or
    a space-separated string)."""

    def __init__(self, config: Settings) -> None:
        assert config.oidc_issuer is not None and config.oidc_audience is not None
        self.issuer = config.oidc_issuer
        self.audience = config.oidc_audience
        self.algorithms = config.algorithms
        self.roles_claim = config.oidc_roles_claim
        self.leeway = config.oidc_leeway
        self.keys = IssuerKeys(self.issuer, config.oidc_jwks_url)

    def principal(self, token: str) -> Principal:
        """Raises ``ProblemError``: 401 for a token that does not verify (saying why),
        503 when the issuer's keys cannot be fetched. Blocking: it may fetch them."""
        return self.verify(token)[0]

    def verify(self, token: str) -> tuple[Principal, float | None]:
        """The token's principal and when the token expires (``principal``)."""
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except PyJWTError as exc:
            raise _unauthorised(f"the bearer token is not a JWT: {exc}") from exc
        issuer = unverified.get("iss")
        if issuer != self.issuer:
            raise _unauthorised(f"the token's issuer {issuer!r} is not the configured issuer")
        if header.get("alg") not in self.algorithms:
            raise _unauthorised(
                f"the token is signed with {header.get('alg')!r}; "
                f"accepted: {', '.join(self.algorithms)}"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise _unauthorised("the token names no key of the issuer (no kid)")
        try:
            key = self.keys.key(kid)
        except KeysUnavailableError as exc:
            raise ProblemError(
                503, "Issuer unreachable", f"cannot fetch the issuer's keys: {exc}"
            ) from exc
        except UnknownKeyError as exc:
            raise _unauthorised(f"no key of the issuer signs this token: {exc}") from exc
        if key.algorithm_name != header["alg"]:
            raise _unauthorised(
                f"the token is signed with {header['alg']!r} but key {key.key_id!r} "
                f"is an {key.algorithm_name} key"
            )
        claims = self._claims(token, key)
        found = claims.get("sub")
        subject = found if isinstance(found, str) else ""
        try:
            check_name(subject, "the token's sub")
        except ValueError as exc:
            raise _unauthorised(str(exc)) from exc
        roles = frozenset(r for r in self._roles(claims) if _printable(r))
        expires = claims.get("exp")
        return (
            Principal(id=subject, method="oidc", roles=roles, issuer=self.issuer),
            float(expires) if isinstance(expires, int | float) else None,
        )

    def _claims(self, token: str, key: PyJWK) -> dict[str, Any]:
        """The verified claims. ``key`` is given as the ``PyJWK`` itself: PyJWT then
        verifies with the key's own algorithm, never one of another kind of key."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except PyJWTError as exc:
            raise _unauthorised(self._why(exc)) from exc
        return claims

    def _why(self, exc: PyJWTError) -> str:
        """What a refused token is told."""
        match exc:
            case ExpiredSignatureError():
                return "the token has expired"
            case ImmatureSignatureError():
                return "the token is not valid yet (nbf or iat)"
            case InvalidAudienceError():
                return f"the token is not for audience {self.audience!r}"
            case InvalidIssuerError():
                return "the token's issuer is not the configured issuer"
            case InvalidSignatureError():
                return "the token's signature does not verify"
            case MissingRequiredClaimError():
                return f"the token lacks a claim: {exc}"
            case _:
                return f"the token is invalid: {exc}"

    def _roles(self, claims: Mapping[str, Any]) -> list[str]:
        found: Any = claims
        for part in self.roles_claim.split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if isinstance(found, str):
            return found.split()
        if isinstance(found, list):
            return [r for r in found if isinstance(r, str) and r]
        return []


def _printable(role: str) -> bool:
    try:
        check_name(role)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Client:
    """A named approval client, as configured."""

    name: str
    roles: frozenset[str]
    verifiers: tuple[Webhook, ...]


class Authenticator:
    """The API's one door: which caller a request is, before its body is read (the run
    endpoints, an approval's bearer token), and which approval client signed an
    approval (once its body is read)."""

    def __init__(self, config: Settings, metrics: Metrics) -> None:
        self.api_token = config.api_token
        self.tokens = TokenVerifier(config) if config.oidc_issuer else None
        self.clients = tuple(
            Client(name, frozenset(c.roles), tuple(Webhook(s) for s in c.secrets))
            for name, c in config.clients.items()
        )
        self._metrics = metrics

    @property
    def open(self) -> bool:
        """No API token and no issuer: the run endpoints take anyone."""
        return not self.api_token and self.tokens is None

    def bearer(self, authorization: str | None) -> str | None:
        """The token of ``Authorization: Bearer <token>``."""
        if authorization is None:
            return None
        scheme, _, token = authorization.partition(" ")
        return token.strip() or None if scheme.lower() == "bearer" else None

    def verifies(self, headers: Mapping[str, str], *, approval: bool) -> bool:
        """Whether ``approver`` (an approval) or ``caller`` verifies an OIDC token for
        these headers: the one check that may wait on the issuer, so the only one run
        off the event loop."""
        if self.tokens is None:
            return False
        authorization = headers.get("authorization")
        if approval:
            return "webhook-signature" not in headers and self.bearer(authorization) is not None
        if self.api_token and token_matches(authorization, self.api_token):
            return False
        token = self.bearer(authorization)
        return token is not None and token.count(".") == 2

    def caller(self, authorization: str | None) -> Principal | None:
        """The caller of a run endpoint: None for the API token's holder (a trusted
        backend) or anyone when the API is open; else the token's principal. Raises
        ``ProblemError`` (401). Blocking when the issuer's keys must be fetched."""
        return self.caller_until(authorization)[0]

    def caller_until(self, authorization: str | None) -> tuple[Principal | None, float | None]:
        """``caller``, and until when its credential is accepted (epoch seconds: a
        token's ``exp`` and the leeway; None for the API token, which does not expire):
        what a stream opened with it is served until."""
        if self.api_token and token_matches(authorization, self.api_token):
            return None, None
        token = self.bearer(authorization)
        if self.tokens is not None and token is not None and token.count(".") == 2:
            principal, expires = self.tokens.verify(token)
            return principal, None if expires is None else expires + self.tokens.leeway
        if self.open:
            return None, None
        accepted = "Authorization: Bearer <AIRLOCK_API_TOKEN>" if self.api_token else ""
        if self.tokens is not None:
            accepted += (" or " if accepted else "Authorization: Bearer ") + "<an OIDC token>"
        raise _unauthorised(f"send {accepted}")

    def approver(self, headers: Mapping[str, str]) -> Principal | None:
        """Before an approval's body is read: the principal of its bearer token, or None
        for a signed webhook (its headers checked, its signature checked with the body
        by ``client``). Raises ``ProblemError`` (401; 503 when nothing is configured)."""
        if "webhook-signature" in headers or not self.tokens:
            if not self.clients:
                self._metrics.rejections.labels("not_configured").inc()
                raise ProblemError(
                    503,
                    "Approvals disabled",
                    "set AIRLOCK_WEBHOOK_SECRET, AIRLOCK_APPROVAL_CLIENTS or AIRLOCK_OIDC_ISSUER",
                )
            signed_headers(headers, self._metrics)
            return None
        token = self.bearer(headers.get("authorization"))
        if token is None:
            self._metrics.rejections.labels("missing_headers").inc()
            raise ProblemError(
                401,
                "Unsigned",
                "sign the approval (webhook-id, webhook-timestamp, webhook-signature) "
                "or send Authorization: Bearer <an OIDC token>",
            )
        return self.tokens.principal(token)

    def client(self, raw: bytes, headers: dict[str, str]) -> tuple[Client, str]:
        """The approval client whose secret signed ``raw``, and the webhook id. Raises
        ``ProblemError`` (401)."""
        webhook_id = signed_headers(headers, self._metrics)
        for client in self.clients:
            for verifier in client.verifiers:  # several secrets while one is rotated out
                try:
                    verifier.verify(raw, headers, json_parse=False)
                    return client, webhook_id
                except (WebhookVerificationError, ValueError, UnicodeDecodeError):
                    continue
        self._metrics.rejections.labels("signature").inc()
        raise ProblemError(
            401, "Bad signature", "no webhook-signature matches a configured client's secret"
        )
