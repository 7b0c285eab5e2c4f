"""Secrets are checked at start (issue 26, defect 3: ``AIRLOCK_SESSION_SECRET`` was not)."""

from __future__ import annotations

import base64

import pytest

from airlock.persistence.db import ConfigurationError
from airlock.workers.service.settings import Settings, check_secrets


@pytest.mark.parametrize(
    "weak", ["changeme", "x", "secret", "change-me", "short-16-chars!", "whsec_c2hvcnQ="]
)
def test_a_weak_or_known_session_secret_is_refused_naming_the_variable(weak: str) -> None:
    with pytest.raises(ConfigurationError, match="AIRLOCK_SESSION_SECRET"):
        check_secrets(Settings.model_validate({"session_secret": weak}))


def test_a_strong_session_secret_or_none_is_accepted() -> None:
    strong = "whsec_" + base64.b64encode(b"a-session-key-of-32-bytes-long!!").decode()
    for value in (strong, "a long random passphrase", None):
        check_secrets(Settings.model_validate({"session_secret": value}))


@pytest.mark.parametrize(
    "url",
    ["redis://redis.example:6379/0?password=hunter2", "amqp://host//?userid=a&password=b",
     "redis://h:6379/0?virtual_host=1"],
)  # fmt: skip
def test_a_broker_url_naming_its_parts_in_the_query_is_refused_without_the_password(
    url: str,
) -> None:
    """kombu fails on these with a TypeError when the worker starts."""
    with pytest.raises(ValueError, match="cannot be a query parameter") as refused:
        Settings.model_validate({"broker_url": url})
    assert "hunter2" not in str(refused.value)


def test_a_broker_url_with_its_password_in_the_url_is_accepted() -> None:
    url = "redis://:hunter2@redis.example:6379/0?ssl_cert_reqs=none"
    assert Settings.model_validate({"broker_url": url}).broker_url == url
