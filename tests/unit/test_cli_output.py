"""What the CLI prints of a URL: never its password."""

from __future__ import annotations

import pytest

from airlock.workers.cli.output import without_password
from airlock.workers.service.views import event_summary


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://airlock:s3cret@db:5432/airlock",
            "postgresql+psycopg://airlock:***@db:5432/airlock",
        ),
        ("redis://:s3cret@redis:6379/0", "redis://:**@redis:6379/0"),
        ("amqp://guest:s3cret@rabbit//", "amqp://guest:**@rabbit//"),
        ("sqlite:////srv/airlock.db", "sqlite:////srv/airlock.db"),
        ("redis://redis:6379/0", "redis://redis:6379/0"),
        ("filesystem://", "filesystem://"),
    ],
)
def test_a_url_is_printed_without_its_password(url: str, shown: str) -> None:
    assert without_password(url) == shown
    assert "s3cret" not in without_password(url)


def test_a_refused_broker_url_is_named_without_its_password() -> None:
    from pydantic import ValidationError

    from airlock.workers.service.settings import Settings

    with pytest.raises(ValidationError) as refused:
        Settings(broker_url="foo://airlock:s3cret@broker/0")
    message = refused.value.errors()[0]["msg"]
    assert "broker/0" in message and "s3cret" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://airlock@db/airlock?password=s3cret",
        "postgresql://airlock@db/airlock?sslmode=require&sslpassword=s3cret&password=s3cret",
        "postgresql+psycopg://airlock:s3cret@db/airlock?password=s3cret",
        "redis://redis:6379/0?password=s3cret",
        "redis://redis:6379/0?PASSWORD=s3cret&ssl=0",
    ],
)
def test_a_password_in_the_query_is_not_printed(url: str) -> None:
    """Attack review: libpq and redis-py take a password in the URL's query, which
    SQLAlchemy's and kombu's renderings (and a URL without ``@``) printed as is."""
    assert "s3cret" not in without_password(url)
    assert "=***" in without_password(url)


def test_db_upgrade_says_which_database_without_a_query_password() -> None:
    from airlock.persistence.schema import check_url, upgrade_or_explain

    url = "postgresql://airlock@127.0.0.1:1/x?password=s3cret"  # nothing listens there
    explained = upgrade_or_explain(url)
    assert explained is not None and "s3cret" not in explained and "password=***" in explained
    said = check_url(url).explain(named=True)
    assert "s3cret" not in said and "password=***" in said


def test_a_refused_url_hides_a_query_password() -> None:
    from pydantic import ValidationError

    from airlock.workers.service.settings import Settings

    with pytest.raises(ValidationError) as refused:
        Settings(database_url="mysql://airlock@db/airlock?password=s3cret")
    assert "s3cret" not in str(refused.value)
    with pytest.raises(ValidationError) as refused:
        Settings(broker_url="foo://broker/0?password=s3cret")
    assert "s3cret" not in str(refused.value)


def test_a_refused_setting_is_not_repeated_in_the_error() -> None:
    """Attack review: ``uvicorn airlock.workers.api:app`` and ``celery -A airlock.workers worker``
    print
    a settings error whole, and pydantic repeated the refused value in it
    (``input_value='foo://u:s3cret@…'``)."""
    from pydantic import ValidationError

    from airlock.workers.service.settings import Settings

    with pytest.raises(ValidationError) as refused:
        Settings(broker_url="foo://u:s3cret@h/0")
    assert "s3cret" not in str(refused.value) and "input_value" not in str(refused.value)
    with pytest.raises(ValidationError) as refused:
        Settings(database_url="mysql://u:s3cret@h/db")
    assert "s3cret" not in str(refused.value) and "input_value" not in str(refused.value)


def test_an_event_summary_says_where_it_cut_a_long_result() -> None:
    payload = {"name": "lookup", "outcome": "ok", "result": "order 17 " + "shipped " * 20}
    summary = event_summary("tool", payload)
    assert summary.endswith("shipped…") and len(summary) <= len("lookup → ok: ") + 60
    short = event_summary("tool", {"name": "lookup", "outcome": "ok", "result": "done"})
    assert short == "lookup → ok: done"
    one_word = event_summary("other", {"x": "y" * 200})
    assert one_word.startswith("x: y") and one_word.endswith("…") and len(one_word) <= 120


def test_an_event_with_no_words_of_its_own_is_shown_as_fields_not_json() -> None:
    """Issue 47, item 4: ``runs events`` printed every payload's raw JSON."""
    summary = event_summary(
        "expired", {"action": "deny", "by": {"kind": "system", "name": "expiry"}, "n": 2}
    )
    assert summary == "action: deny; by: kind=system, name=expiry; n: 2"
    assert event_summary("request", {"agent": "w1", "input": "mail\n42"}) == "w1 asked: mail 42"
    assert event_summary("other", {}) == "—"
