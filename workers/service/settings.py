"""Configuration: every ``AIRLOCK_*`` variable, validated at start."""

from __future__ import annotations

import base64
import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from airlock.loop.durations import duration_seconds
from airlock.persistence.db import (
    DEFAULT_DATABASE_URL,
    ConfigurationError,
    hide_password,
    normalise_url,
)
from airlock.workers.mcp.config import load_servers
from airlock.workers.service.policy_file import PolicyFileError, read_policy
from airlock.workers.service.principals import OPERATOR_ROLES, check_name

EMBEDDED_BROKER = "filesystem://"


class ApprovalClient(BaseModel):
    """A named approval client (``AIRLOCK_APPROVAL_CLIENTS``): it signs its webhooks
    with ``secret`` (several, space- or comma-separated, while one is rotated out) and
    vouches for the approvers it names, who act with ``roles``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    secret: str = Field(min_length=1)
    roles: tuple[str, ...] = ()

    @property
    def secrets(self) -> list[str]:
        return split_secrets(self.secret)


def split_secrets(value: str | None) -> list[str]:
    return [s for s in (value or "").replace(",", " ").split() if s]


def split_roles(value: str) -> list[str]:
    return [r for r in (r.strip() for r in value.split(",")) if r]


DEFAULT_CLIENT = "default"
"""The approval client that ``AIRLOCK_WEBHOOK_SECRET`` is."""


_KOMBU_URL_PARTS = frozenset(
    {"password", "userid", "hostname", "port", "virtual_host", "transport"}
)
"""What kombu's ``parse_url`` takes from a URL's own parts (a query naming one again
fails with a TypeError when the worker starts)."""


class Settings(BaseSettings):
    # a refused value is not repeated in the error (``celery -A workers``, ``uvicorn
    # a refused value is not repeated in the error (``celery -A airlock.workers``, ``uvicorn
    # airlock.workers.api:app`` print it whole): it may be a URL with its password, or a secret
    model_config = SettingsConfigDict(
        env_prefix="AIRLOCK_", extra="ignore", frozen=True, hide_input_in_errors=True
    )

    database_url: str = DEFAULT_DATABASE_URL
    broker_url: str = EMBEDDED_BROKER
    agents: str = "airlock.workers.demo_agents:AGENTS"
    webhook_secret: str | None = None
    api_token: str | None = None
    notify_url: str | None = None
    notify_secret: str | None = None
    # each delivery attempt ends within this many seconds, whatever the receiver does
    # (less than the minute a deliverer holds a notification it took)
    notify_timeout: float = Field(default=10.0, gt=0, le=50)
    # deliveries one worker process keeps in flight at most (its dispatcher's); 0: this
    # worker delivers none (another does)
    notify_concurrency: int = Field(default=64, ge=0, le=1000)
    # a notification not delivered is tried again after 1 s, doubled per attempt up to
    # this many seconds (jittered), and given up after the last of its attempts
    notify_retry_max_delay: float = Field(default=600.0, gt=0)
    notify_max_attempts: int = Field(default=12, ge=1, le=100)
    state_key: str | None = None
    # the approval policy file (TOML), and one judged and recorded but not enforced
    policy: Path | None = None
    policy_shadow: Path | None = None
    # MCP servers whose tools agents import (TOML; docs/mcp.md)
    mcp_servers: Path | None = None
    # how long the MCP gateway holds a client's tools/call for a decision (seconds or a
    # duration: 25, "25s", "2m")
    mcp_wait: float = Field(default=25.0, gt=0, le=3600)
    # principals: named approval clients (JSON: {"name": {"secret": …, "roles": […]}})
    approval_clients: dict[str, ApprovalClient] = Field(default_factory=dict)
    # OIDC / JWT bearer tokens, for the run endpoints and approvals
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_jwks_url: str | None = None
    oidc_roles_claim: str = "roles"
    oidc_algorithms: str = "RS256,ES256"
    oidc_leeway: float = Field(default=30.0, ge=0, le=300)
    # roles whose holders may cancel and retry any run (comma-separated; empty: none)
    operator_roles: str = ",".join(sorted(OPERATOR_ROLES))
    # keys the hash the inbox's sign-ins are stored under (the inbox's own key, derived
    # from no other credential; changing it ends every sign-in)
    session_secret: str | None = None
    retention_days: int = Field(default=30, ge=1)
    # where the embedded broker keeps its queue folders
    home: Path = Path(".airlock")
    lease_seconds: float = Field(default=60.0, gt=0)
    # unset: Redis keeps no index of unacknowledged messages (see broker_options)
    visibility_timeout: int | None = Field(default=None, ge=1)
    sweep_interval: float = Field(default=15.0, gt=0)
    queued_stale_after: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    soft_shutdown_timeout: float = Field(default=30.0, ge=0)
    retry_base_delay: float = Field(default=1.0, gt=0)
    retry_max_delay: float = Field(default=300.0, gt=0)
    # database connections a process keeps at most in each of its pools (three on
    # PostgreSQL: transactions, single statements, leases); a statement borrows one and
    # gives it back, so this bounds a worker's connections, not its concurrency
    db_pool_size: int = Field(default=8, ge=1, le=100)
    # a statement whose connection dropped (a failover, a restart, a pooler) is retried
    # on a fresh one for up to this long; past it a segment gives its run back, to be
    # continued later, and a request answers 503
    db_retry_seconds: float = Field(default=30.0, ge=0, le=3600)
    # a result of a call that acted is retried for up to this long (only the worker that
    # ran the call knows it)
    db_result_retry_seconds: float = Field(default=600.0, ge=0, le=86400)
    # the port `airlock api` listens on by default, and `airlock health api` asks
    api_port: int = Field(default=8000, ge=1, le=65535)
    # a worker serves its Prometheus metrics (segment durations) on this port
    worker_metrics_port: int | None = Field(default=None, ge=1, le=65535)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return normalise_url(value)

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "filesystem://", "sqla+", "amqp://")):
            raise ValueError(
                "must be redis://…, rediss://…, amqp://…, sqla+… or filesystem://,"
                f" got {hide_password(value)!r}"
            )
        taken = sorted(set(parse_qs(urlsplit(value).query)) & _KOMBU_URL_PARTS)
        if taken:  # kombu reads these from the URL's own parts and fails on a second one
            raise ValueError(
                f"{', '.join(taken)} cannot be a query parameter of the broker URL: give it "
                "in the URL itself (redis://:PASSWORD@host:6379/0, amqp://USER:PASSWORD@host)"
            )
        return value

    @field_validator("agents")
    @classmethod
    def _agents(cls, value: str) -> str:
        for path in (p.strip() for p in value.split(",")):
            if ":" not in path:
                raise ValueError(f"each entry must be module:attribute, got {path!r}")
        return value

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _no_mcp_servers(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("mcp_wait", mode="before")
    @classmethod
    def _mcp_wait(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        text = value.strip()
        if re.fullmatch(r"\d+(\.\d+)?", text, re.ASCII):  # seconds, of ASCII digits only
            return float(text)
        seconds = duration_seconds(text)
        if seconds is None:
            raise ValueError(f"{value!r} is not seconds or a duration like 25s, 2m")
        return seconds

    @field_validator("mcp_servers")
    @classmethod
    def _mcp_servers(cls, value: Path | None) -> Path | None:
        if value is not None:
            load_servers(value)  # McpConfigError (a ValueError): the line and the reason
        return value

    @field_validator("policy", "policy_shadow", mode="before")
    @classmethod
    def _no_policy(cls, value: object) -> object:
        return None if value == "" else value  # an empty variable names no file

    @field_validator("policy", "policy_shadow")
    @classmethod
    def _policy(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                read_policy(value)
            except PolicyFileError as exc:
                raise ValueError(str(exc)) from exc
        return value

    @field_validator("operator_roles")
    @classmethod
    def _operator_roles(cls, value: str) -> str:
        for role in split_roles(value):
            check_name(role, f"the role {role!r}")
        return value

    @field_validator("approval_clients")
    @classmethod
    def _clients(cls, value: dict[str, ApprovalClient]) -> dict[str, ApprovalClient]:
        for name in value:
            if not name or len(name) > 100 or not name.replace("-", "").replace("_", "").isalnum():
                raise ValueError(f"client names are letters, digits, - and _; got {name!r}")
        return value

    @model_validator(mode="after")
    def _principals(self) -> Settings:
        if self.webhook_secret and DEFAULT_CLIENT in self.approval_clients:
            raise ValueError(
                "AIRLOCK_WEBHOOK_SECRET is the approval client 'default'; "
                "AIRLOCK_APPROVAL_CLIENTS defines it too"
            )
        if self.oidc_issuer and not self.oidc_audience:
            raise ValueError("AIRLOCK_OIDC_AUDIENCE is required when AIRLOCK_OIDC_ISSUER is set")
        if (self.oidc_audience or self.oidc_jwks_url) and not self.oidc_issuer:
            raise ValueError(
                "AIRLOCK_OIDC_ISSUER is required with the other AIRLOCK_OIDC_ settings"
            )
        for url in (self.oidc_issuer, self.oidc_jwks_url):
            if url and not url.startswith(("https://", "http://")):
                raise ValueError(f"AIRLOCK_OIDC_ISSUER and _JWKS_URL are URLs, got {url!r}")
        owners: dict[str, str] = {}
        for name, client in self.clients.items():
            for secret in client.secrets:
                if owners.setdefault(secret, name) != name:
                    raise ValueError(
                        f"approval clients {owners[secret]!r} and {name!r} share a secret: "
                        "a signature must name one client"
                    )
        algorithms = self.algorithms
        if not algorithms or any(a == "none" or a.startswith("HS") for a in algorithms):
            raise ValueError(
                "AIRLOCK_OIDC_ALGORITHMS names asymmetric algorithms (RS256, ES256, …), "
                "never none or HS*"
            )
        return self

    @property
    def operators(self) -> frozenset[str]:
        """The roles of ``AIRLOCK_OPERATOR_ROLES``."""
        return frozenset(split_roles(self.operator_roles))

    @property
    def algorithms(self) -> list[str]:
        return split_secrets(self.oidc_algorithms)

    @property
    def clients(self) -> dict[str, ApprovalClient]:
        """Every approval client: ``default`` (``AIRLOCK_WEBHOOK_SECRET``), if set, and
        the named ones."""
        clients = dict(self.approval_clients)
        if self.webhook_secret and split_secrets(self.webhook_secret):
            clients[DEFAULT_CLIENT] = ApprovalClient(secret=self.webhook_secret)
        return clients

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url.startswith("filesystem://")

    @property
    def broker_folder(self) -> Path:
        return self.home / "broker"

    @property
    def beat_schedule(self) -> Path:
        """Where beat keeps its schedule by default."""
        return self.home / "celerybeat-schedule"


KNOWN_DEFAULTS = frozenset(
    {
        "change-me",
        "changeme",
        "secret",
        "whsec_Y2hhbmdlLW1lLWNoYW5nZS1tZS1jaGFuZ2UtbWU=",  # an earlier compose default
    }
)
MIN_TOKEN = 8
MIN_SECRET_BYTES = 16


def check_secrets(config: Settings) -> None:
    """Refuse to serve with a public default or a short secret or token, naming the
    variable (``airlock dev`` and ``demo`` make strong ones of their own)."""
    problems: list[str] = []
    if config.api_token is not None:
        token = config.api_token
        if token.lower() in KNOWN_DEFAULTS or "change-me" in token or len(token) < MIN_TOKEN:
            problems.append(
                f"AIRLOCK_API_TOKEN is a known default or shorter than {MIN_TOKEN} characters"
            )
    named = [
        (f"AIRLOCK_APPROVAL_CLIENTS[{name!r}]", client.secret)
        for name, client in config.approval_clients.items()
    ]
    for name, value in (
        ("AIRLOCK_WEBHOOK_SECRET", config.webhook_secret),
        ("AIRLOCK_NOTIFY_SECRET", config.notify_secret),
        *named,
    ):
        if any(_weak(secret) for secret in split_secrets(value)):
            problems.append(
                f"{name} holds a known default or a key shorter than {MIN_SECRET_BYTES} bytes"
            )
    if config.session_secret is not None and _weak(config.session_secret):
        problems.append(
            f"AIRLOCK_SESSION_SECRET is a known default or shorter than {MIN_SECRET_BYTES} bytes"
        )
    if problems:
        raise ConfigurationError("insecure configuration: " + "; ".join(problems))


def _weak(secret: str) -> bool:
    return secret in KNOWN_DEFAULTS or len(_key_bytes(secret)) < MIN_SECRET_BYTES


def _key_bytes(secret: str) -> bytes:
    raw = secret.removeprefix("whsec_")
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError:
        return raw.encode()


def load_settings() -> Settings:
    try:
        return Settings()
    except SettingsError as exc:  # a value that is not the JSON its field needs
        found = re.search(r'field "(\w+)"', str(exc))
        name = f"AIRLOCK_{found.group(1).upper()}" if found else "an AIRLOCK_ variable"
        raise ConfigurationError(f"bad configuration: {name} is not valid JSON") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"AIRLOCK_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            if err["loc"]
            else str(err["msg"]).removeprefix("Value error, ")
            for err in exc.errors(include_url=False)
        )
        raise ConfigurationError(f"bad configuration: {problems}") from exc


@lru_cache(maxsize=1)
def settings() -> Settings:
    return load_settings()
