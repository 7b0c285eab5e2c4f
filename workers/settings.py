"""Configuration: every ``AIRLOCK_*`` variable, validated at start."""

from __future__ import annotations

import base64
from functools import lru_cache
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from persistence.db import DEFAULT_DATABASE_URL, ConfigurationError, normalise_url

EMBEDDED_BROKER = "filesystem://"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AIRLOCK_", extra="ignore", frozen=True)

    database_url: str = DEFAULT_DATABASE_URL
    broker_url: str = EMBEDDED_BROKER
    agents: str = "workers.demo_agents:AGENTS"
    webhook_secret: str | None = None
    api_token: str | None = None
    notify_url: str | None = None
    notify_secret: str | None = None
    state_key: str | None = None
    retention_days: int = Field(default=30, ge=1)
    # where the embedded broker keeps its queue folders
    home: Path = Path(".airlock")
    lease_seconds: float = Field(default=60.0, gt=0)
    visibility_timeout: int = Field(default=3600, ge=1)
    sweep_interval: float = Field(default=15.0, gt=0)
    queued_stale_after: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    soft_shutdown_timeout: float = Field(default=30.0, ge=0)
    retry_base_delay: float = Field(default=1.0, gt=0)
    retry_max_delay: float = Field(default=300.0, gt=0)
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
                f"must be redis://…, rediss://…, amqp://…, sqla+… or filesystem://, got {value!r}"
            )
        return value

    @field_validator("agents")
    @classmethod
    def _agents(cls, value: str) -> str:
        for path in (p.strip() for p in value.split(",")):
            if ":" not in path:
                raise ValueError(f"each entry must be module:attribute, got {path!r}")
        return value

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url.startswith("filesystem://")

    @property
    def broker_folder(self) -> Path:
        return self.home / "broker"


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
    for name, value in (
        ("AIRLOCK_WEBHOOK_SECRET", config.webhook_secret),
        ("AIRLOCK_NOTIFY_SECRET", config.notify_secret),
    ):
        for secret in (value or "").replace(",", " ").split():
            if secret in KNOWN_DEFAULTS or len(_key_bytes(secret)) < MIN_SECRET_BYTES:
                problems.append(
                    f"{name} holds a known default or a key shorter than {MIN_SECRET_BYTES} bytes"
                )
    if problems:
        raise ConfigurationError("insecure configuration: " + "; ".join(problems))


def _key_bytes(secret: str) -> bytes:
    raw = secret.removeprefix("whsec_")
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError:
        return raw.encode()


def load_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"AIRLOCK_{'_'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise ConfigurationError(f"bad configuration: {problems}") from exc


@lru_cache(maxsize=1)
def settings() -> Settings:
    return load_settings()
