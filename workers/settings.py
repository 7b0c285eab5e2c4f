"""Configuration: every ``AIRLOCK_*`` variable, validated at start."""

from __future__ import annotations

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
