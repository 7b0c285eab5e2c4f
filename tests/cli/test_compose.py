"""docker-compose.yml: every service runs a real command with what it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from airlock.persistence.db import ConfigurationError
from airlock.workers.cli.commands import app
from airlock.workers.service.settings import Settings

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def services() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    result: dict[str, Any] = loaded["services"]
    return result


def resolve(argv: list[str]) -> tuple[Any, list[str]]:
    """The airlock (sub)command that ``argv`` names, and the arguments left for it."""
    command: Any = typer.main.get_command(app)
    rest = list(argv)
    while hasattr(command, "get_command"):  # a group
        word = rest.pop(0)
        sub = command.get_command(
            command.make_context("airlock", [word, "--help"], resilient_parsing=True), word
        )
        assert sub is not None, f"`airlock {' '.join(argv)}`: no command {word!r}"
        command = sub
    return command, rest


def test_the_expected_services_exist() -> None:
    assert set(services()) == {
        "postgres", "redis", "migrate", "api", "worker", "beat",
    }  # fmt: skip


def test_every_airlock_command_is_real() -> None:
    for name in ("migrate", "api", "worker", "beat"):
        argv = services()[name]["command"]
        assert argv[0] == "airlock", name
        command, rest = resolve(argv[1:])
        if command.context_settings.get("allow_extra_args"):
            continue  # worker/beat pass their arguments through to Celery
        command.make_context("airlock", rest)  # raises on an unknown option or bad value


def test_every_airlock_service_has_valid_configuration() -> None:
    for name in ("migrate", "api", "worker", "beat"):
        env = services()[name]["environment"]
        values = {
            k.removeprefix("AIRLOCK_").lower(): _default(v)
            for k, v in env.items()
            if k.startswith("AIRLOCK_") and _default(v)
        }
        for needed in ("database_url", "broker_url", "webhook_secret", "api_token"):
            assert needed in values, f"{name} lacks AIRLOCK_{needed.upper()}"
        config = Settings.model_validate(values)
        assert config.database_url.startswith("postgresql+psycopg://")
        assert config.broker_url.startswith("redis://redis:")


def test_redis_keeps_messages_and_every_service_is_supervised() -> None:
    redis_cmd = " ".join(services()["redis"]["command"])
    assert "--appendonly yes" in redis_cmd and "--maxmemory-policy noeviction" in redis_cmd
    for name, service in services().items():
        assert "restart" in service, name
        if name != "migrate":
            assert "healthcheck" in service, name
    # proves it consumes, not only that it lives
    assert services()["worker"]["healthcheck"]["test"] == ["CMD", "airlock", "health", "worker"]


def test_healthchecks_are_commands_that_docker_runs_as_written() -> None:
    """Issue 27, defect 2: an exec-form check is run with no shell, so a `$$HOSTNAME` in
    it reached Celery as the text `$HOSTNAME` (and it named four nodes by hand)."""
    for name in ("api", "worker", "beat"):
        test = services()[name]["healthcheck"]["test"]
        assert test == ["CMD", "airlock", "health", name], name
        command, rest = resolve(test[2:])
        command.make_context("airlock", rest)
    for name, service in services().items():
        test = service.get("healthcheck", {}).get("test", [])
        if test[:1] == ["CMD"]:
            assert not any("$" in word for word in test), f"{name}: no shell expands {test}"


def test_every_setting_is_passed_through_to_the_airlock_services() -> None:
    """Issue 27, defect 9: the OIDC, approval-client and session-secret variables (and
    others) never reached the containers. Every AIRLOCK_ variable the settings read is
    in each Airlock service's environment, but AIRLOCK_HOME (the image sets it)."""
    read = {f"AIRLOCK_{name.upper()}" for name in Settings.model_fields} - {"AIRLOCK_HOME"}
    for name in ("migrate", "api", "worker", "beat"):
        passed = set(services()[name]["environment"])
        assert read - passed == set(), name
        assert {v for v in passed if v.startswith("AIRLOCK_")} - read == set(), name


def test_the_env_example_documents_every_variable_compose_takes() -> None:
    example = (COMPOSE.parent / ".env.example").read_text()
    for variable in services()["api"]["environment"]:
        if variable.startswith("AIRLOCK_") and variable not in (
            "AIRLOCK_DATABASE_URL",
            "AIRLOCK_BROKER_URL",
        ):
            assert f"{variable}=" in example, variable
    assert "whsec_" in example and "base64" in example


REQUIRED_FROM_ENV = {
    "AIRLOCK_WEBHOOK_SECRET": "whsec_" + "c3Ryb25nLWtleS1mb3ItdGhlLWNvbXBvc2UtdGVzdA==",
    "AIRLOCK_API_TOKEN": "a-strong-token-from-dot-env",
}


def _default(value: object) -> str:
    """What compose puts in a variable: its default, or for a required one (``:?``)
    what the operator's .env gives."""
    if value is None:  # passed through from .env when set there: here, not set
        return ""
    text = str(value)
    if text.startswith("${") and ":-" in text:
        return text.split(":-", 1)[1].rstrip("}")
    if text.startswith("${") and ":?" in text:
        return REQUIRED_FROM_ENV[text[2:].split(":?", 1)[0]]
    return text


def test_secrets_have_no_public_defaults_and_the_api_is_local() -> None:
    from airlock.workers.service.settings import check_secrets

    for name in ("api", "worker", "beat"):
        env = services()[name]["environment"]
        for variable in ("AIRLOCK_WEBHOOK_SECRET", "AIRLOCK_API_TOKEN"):
            assert ":?" in str(env[variable]), f"{name}: {variable} has a default"
    assert all(str(p).startswith("127.0.0.1:") for p in services()["api"]["ports"])
    for weak in ({"api_token": "change-me"}, {"api_token": "short"}):
        with pytest.raises(ConfigurationError, match="AIRLOCK_API_TOKEN"):
            check_secrets(Settings.model_validate(weak))
    old_default = "whsec_Y2hhbmdlLW1lLWNoYW5nZS1tZS1jaGFuZ2UtbWU="
    with pytest.raises(ConfigurationError, match="AIRLOCK_WEBHOOK_SECRET"):
        check_secrets(Settings.model_validate({"webhook_secret": old_default}))
    check_secrets(
        Settings.model_validate(
            {k.removeprefix("AIRLOCK_").lower(): v for k, v in REQUIRED_FROM_ENV.items()}
        )
    )
