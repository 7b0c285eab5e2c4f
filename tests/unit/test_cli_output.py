"""What the CLI prints of a URL: never its password."""

from __future__ import annotations

import pytest

from workers.cli.output import without_password


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://airlock:s3cret@db:5432/airlock",
            "postgresql+psycopg://airlock:***@db:5432/airlock",
        ),
        ("redis://:s3cret@redis:6379/0", "redis://:**@redis:6379/0"),
        ("amqp://guest:s3cret@rabbit//", "amqp://guest:**@rabbit//"),
        ("sqlite:///./airlock.db", "sqlite:///./airlock.db"),
        ("redis://redis:6379/0", "redis://redis:6379/0"),
        ("filesystem://", "filesystem://"),
    ],
)
def test_a_url_is_printed_without_its_password(url: str, shown: str) -> None:
    assert without_password(url) == shown
    assert "s3cret" not in without_password(url)


def test_a_refused_broker_url_is_named_without_its_password() -> None:
    from pydantic import ValidationError

    from workers.service.settings import Settings

    with pytest.raises(ValidationError) as refused:
        Settings(broker_url="foo://airlock:s3cret@broker/0")
    message = refused.value.errors()[0]["msg"]
    assert "broker/0" in message and "s3cret" not in message
